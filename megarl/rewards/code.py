"""The code reward: the response's program against the tests stored in the row's ground truth, each test a run in
the sandbox (megarl/sandbox). Score: the share of tests passed, or 1 only if all pass (`reward.code.mode`).

A ground truth (a dict, or its JSON text as parquet keeps it) holds one kind of test:
- `{"tests": [{"stdin": "3 4\\n", "stdout": "7\\n"}, ...]}`: the program reads stdin, its stdout must match;
- `{"inputs": [...], "outputs": [...]}` (APPS, TACO, PRIME's code data): stdin/stdout pairs, or with `"fn_name"`
  the arguments of a call to that function, whose result must equal the output;
- `{"asserts": ["assert add(3, 4) == 7", ...]}`: each runs after the program.
Outputs match line by line, trailing whitespace ignored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from megarl.rewards.outcome import AnswerSpan, GroundTruthError, Outcome, failure
from megarl.sandbox import Program, RunResult, Sandbox

# verl's names for code datasets, and ours.
CODE_SOURCES = ("code", "codecontests", "apps", "taco", "codeforces", "primeintellect", "livecodebench")
MODES = ("fraction", "all")
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL)
_CALL = """
import json as _json, sys as _sys
_result = {fn}(*_json.loads(_sys.stdin.read()))
print(_json.dumps(_result))
"""


@dataclass(frozen=True)
class CodeTest:
    """One test: what the program's run gets appended and reads, and the stdout it must print."""

    suffix: str = ""
    stdin: str = ""
    stdout: Optional[str] = None  # None: passing is exiting with status 0 (asserts)


def find_program(response: str, **_: Any) -> Optional[AnswerSpan]:
    """The last fenced code block (```python ... ```), else the whole response."""
    blocks = list(_FENCE.finditer(response))
    if blocks:
        return AnswerSpan(blocks[-1].group(1), blocks[-1].start(1), blocks[-1].end(1))
    return AnswerSpan(response, 0, len(response)) if response.strip() else None


def parse_tests(ground_truth: Any) -> list[CodeTest]:
    """The tests a ground truth holds; GroundTruthError naming the accepted forms if it holds none."""
    try:
        truth = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
        tests = _tests(truth) if isinstance(truth, dict) else []
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
        tests = []
    if not tests:
        raise GroundTruthError(
            "a code ground truth must hold tests: {'tests': [{'stdin': ..., 'stdout': ...}]}, {'asserts': [...]} or "
            f"{{'inputs': [...], 'outputs': [...]}} (with 'fn_name' for a function); got {str(ground_truth)[:200]!r}")
    return tests


def _tests(truth: dict) -> list[CodeTest]:
    if truth.get("tests"):
        return [CodeTest(stdin=t.get("stdin", ""), stdout=t["stdout"]) for t in truth["tests"]]
    if truth.get("asserts"):
        return [CodeTest(suffix="\n" + line + "\n") for line in truth["asserts"]]
    inputs, outputs = truth.get("inputs") or [], truth.get("outputs") or []
    if not inputs or len(inputs) != len(outputs):
        return []
    if truth.get("fn_name"):
        call = _CALL.format(fn=truth["fn_name"])
        return [CodeTest(call, json.dumps(i), json.dumps(o) + "\n") for i, o in zip(inputs, outputs)]
    return [CodeTest(stdin=_text(i), stdout=_text(o)) for i, o in zip(inputs, outputs)]


def passed(test: CodeTest, result: RunResult) -> bool:
    if not result.ok:
        return False
    return test.stdout is None or _lines(result.stdout) == _lines(test.stdout)


class CodeScorer:
    """Scores a batch's code samples: every test of every sample in the sandbox, `sandbox.config.workers` at once."""

    def __init__(self, sandbox: Sandbox, mode: str = "fraction"):
        if mode not in MODES:
            raise ValueError(f"reward.code.mode={mode!r}: choose one of {', '.join(MODES)}")
        self.sandbox, self.mode = sandbox, mode

    def score(self, samples: Sequence[dict]) -> list[Outcome]:
        """Each sample's Outcome; its extra keys: acc, tests_passed, tests_total, sandbox_timeouts. A sample whose
        ground truth holds no tests fails (GroundTruthError) and runs nothing."""
        plans: list[tuple[str, list[CodeTest]] | GroundTruthError] = []
        for sample in samples:
            try:
                program = find_program(sample["solution_str"])
                plans.append((program.text if program else "", parse_tests(sample["ground_truth"])))
            except GroundTruthError as exc:
                plans.append(exc)
        runs = [Program(plan[0] + test.suffix, test.stdin) for plan in plans if isinstance(plan, tuple)
                for test in plan[1]]
        results = iter(self.sandbox.run_many(runs))
        return [failure(plan) if isinstance(plan, GroundTruthError)
                else self._outcome(plan[1], [next(results) for _ in plan[1]]) for plan in plans]

    def _outcome(self, tests: list[CodeTest], results: list[RunResult]) -> Outcome:
        passes = sum(passed(t, r) for t, r in zip(tests, results))
        score = passes / len(tests) if self.mode == "fraction" else float(passes == len(tests))
        return Outcome(score, {"acc": float(passes == len(tests)), "tests_passed": passes, "tests_total": len(tests),
                               "sandbox_timeouts": sum(r.timed_out for r in results)})


def compute_score(solution_str: str, ground_truth: Any, mode: str = "fraction", **_: Any) -> dict:
    """One response's score, in a sandbox of its own with the default limits (for a reward function that calls
    default_compute_score; the trainer scores code batches with a CodeScorer and `reward.sandbox`)."""
    from megarl.config.schema import SandboxConfig

    with Sandbox(SandboxConfig()) as sandbox:
        outcome = CodeScorer(sandbox, mode).score([{"solution_str": solution_str, "ground_truth": ground_truth}])[0]
    if outcome.error is not None:
        raise GroundTruthError(outcome.error)
    return {"score": outcome.score, **outcome.extra}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "\n".join(map(str, value)) + "\n"


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip().splitlines()]
