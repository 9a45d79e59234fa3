"""The code reward against hand-written programs: each scores as it should within the sandbox's limits, whatever the
program does; the trainer's scorer runs code rows in the sandbox beside rule-scored ones."""

import json
import shutil
from dataclasses import replace

import pytest
import torch

from megarl.config.schema import CodeRewardConfig, SandboxConfig
from megarl.rewards import RewardScorer, default_compute_score
from megarl.rewards.code import CodeScorer, find_program, parse_tests
from megarl.rewards.outcome import GroundTruthError
from megarl.sandbox import Sandbox
from tests.megarl.rewards.test_dispatch import encode_responses

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None,
                                reason="needs bubblewrap (apt-get install bubblewrap; .ci/run installs it)")
LIMITS = SandboxConfig(wall_s=3.0, cpu_s=1.0, memory_mb=256, processes=8, output_bytes=4096, workers=4)
ADD = {"tests": [{"stdin": "3 4\n", "stdout": "7\n"}, {"stdin": "-1 1\n", "stdout": "0\n"},
                 {"stdin": "10 20\n", "stdout": "30\n"}]}
PROGRAMS = {  # name: (response, the share of ADD's tests it passes)
    "correct": ("Here it is:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```", 1.0),
    "wrong": ("```python\na, b = map(int, input().split())\nprint(a * b)\n```", 0.0),
    "right_once": ("```python\na, b = map(int, input().split())\nprint(7 if a == 3 else a - b)\n```", 1 / 3),
    "crashing": ("```python\nraise SystemExit(input().split()[5])\n```", 0.0),
    "looping": ("```python\nwhile True:\n    pass\n```", 0.0),
    "sleeping": ("```python\nimport time\ntime.sleep(100)\n```", 0.0),
    "memory_hungry": ("```python\nx = [0] * (1 << 30)\nprint(7)\n```", 0.0),
    "malicious": ("```python\nimport os, socket\nfor path in os.listdir('/'):\n    pass\n"
                  "socket.create_connection(('1.1.1.1', 80), timeout=1)\nprint(7)\n```", 0.0),
    "forking": ("```python\nimport os\nwhile True:\n    os.fork()\n```", 0.0),
}


@pytest.fixture(scope="module")
def scorer():
    with Sandbox(LIMITS) as sandbox:
        yield CodeScorer(sandbox)


def test_hand_written_programs_score_as_they_should(scorer):
    samples = [{"solution_str": response, "ground_truth": json.dumps(ADD)} for response, _ in PROGRAMS.values()]
    outcomes = scorer.score(samples)
    for name, outcome in zip(PROGRAMS, outcomes):
        assert outcome.error is None, (name, outcome.error)
        assert outcome.score == pytest.approx(PROGRAMS[name][1]), name
        assert outcome.extra["tests_total"] == 3
    timeouts = {name: o.extra["sandbox_timeouts"] for name, o in zip(PROGRAMS, outcomes)}
    assert timeouts["looping"] == timeouts["sleeping"] == 3 and timeouts["correct"] == timeouts["wrong"] == 0


def test_all_or_nothing_mode_and_the_other_test_forms():
    with Sandbox(LIMITS) as sandbox:
        every = CodeScorer(sandbox, "all")
        right_once = {"solution_str": PROGRAMS["right_once"][0], "ground_truth": ADD}
        asserts = {"solution_str": "def add(a, b):\n    return a + b", "ground_truth": {
            "asserts": ["assert add(1, 2) == 3", "assert add(2, 2) == 5"]}}
        call = {"solution_str": "```python\ndef add(a, b):\n    return a + b\n```", "ground_truth": {
            "fn_name": "add", "inputs": [[1, 2], [[1], [2]]], "outputs": [3, [1, 2]]}}
        apps = {"solution_str": PROGRAMS["correct"][0], "ground_truth": {"inputs": ["3 4\n"], "outputs": ["7\n"]}}
        outcomes = every.score([right_once, asserts, call, apps])
        fraction = CodeScorer(sandbox).score([asserts])[0]
    assert [o.score for o in outcomes] == [0.0, 0.0, 1.0, 1.0]
    assert fraction.score == 0.5 and fraction.extra["acc"] == 0.0
    with pytest.raises(ValueError, match="reward.code.mode='some'"):
        CodeScorer(sandbox, "some")


def test_the_program_is_the_last_code_block_or_the_whole_response():
    assert find_program("try\n```python\nprint(1)\n```\nbetter:\n```\nprint(2)\n```").text == "print(2)\n"
    assert find_program("print(3)").text == "print(3)"
    assert find_program("   ") is None


@pytest.mark.parametrize("truth", ["#### 7", {"tests": []}, {"inputs": ["1"], "outputs": []}, {"tests": [{}]}, None])
def test_a_ground_truth_without_tests_is_named(truth):
    with pytest.raises(GroundTruthError, match="a code ground truth must hold tests"):
        parse_tests(truth)


def test_the_trainers_scorer_runs_code_rows_in_the_sandbox_beside_rule_rows(tokenizer):
    texts = ["#### 72", PROGRAMS["correct"][0], PROGRAMS["sleeping"][0]]
    responses, mask = encode_responses(tokenizer, texts)
    scorer = RewardScorer(tokenizer, default_compute_score, code=CodeRewardConfig(),
                          sandbox=replace(LIMITS, wall_s=1.0))
    with scorer:
        result = scorer(responses, mask, ["openai/gsm8k", "code", "apps"], ["72", json.dumps(ADD), ADD])
    torch.testing.assert_close(result.scores, torch.tensor([1.0, 1.0, 0.0]))
    assert result.metrics["reward/num_timeouts"] == 1.0 and result.num_errors == 0
    assert result.extra_info["tests_passed"] == [None, 3, 0]


def test_a_code_row_alone_in_a_reward_function_runs_in_a_sandbox_of_its_own():
    assert default_compute_score("code", PROGRAMS["correct"][0], ADD)["score"] == 1.0
