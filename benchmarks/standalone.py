"""Standalone SGLang: one engine generates for a list of requests in timed rounds after a warm-up round, in one or
more variants of the request, interleaved round by round so that a drift of the machine touches every variant alike.
It is the baseline a colocated engine's generation is held to (rl_step.py, engine_probe.py, rollout_pool.py).

A variant says what each round asks and what comes before it:
- `logprobs`: the share of requests whose tokens' log-probabilities come back with them, as megarl's rollout asks
  for all (`return_logprob`);
- `between`: "none" (the prompts' prefixes stay cached from the last round), "flush" (the prefix cache is emptied
  first, as after a colocated weight sync), or "handover" (the engine's weights and KV cache are released and resumed
  first, then its cache flushed: a colocated step's hand-over without the training; the engine needs
  `enable_memory_saver`, and `enable_weights_cpu_backup` so that it resumes the same weights).
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

BETWEEN_ROUNDS = ("none", "flush", "handover")


@dataclass(frozen=True)
class Variant:
    logprobs: float = 0.0
    between: str = "none"

    def __post_init__(self):
        if self.between not in BETWEEN_ROUNDS:
            raise ValueError(f"between={self.between!r}: use one of {BETWEEN_ROUNDS}")
        if not 0 <= self.logprobs <= 1:
            raise ValueError(f"logprobs={self.logprobs}: a share of the requests, from 0 to 1")

    def return_logprob(self, requests: int) -> list[bool]:
        if not self.logprobs:
            return [False] * requests
        return [i % round(1 / self.logprobs) == 0 for i in range(requests)]


PLAIN = Variant()
AS_COLOCATED = Variant(logprobs=1.0, between="flush")  # what a colocated step's generation asks, after its sync
VARIANTS = {"plain": PLAIN, "as_colocated": AS_COLOCATED, "logprobs": Variant(logprobs=1.0),
            "flush": Variant(between="flush"), "logprobs_eighth": Variant(logprobs=0.125, between="flush"),
            "handover": Variant(logprobs=1.0, between="handover")}


def before_round(llm, between: str) -> None:
    if between == "handover":
        llm.release_memory_occupation(tags=["weights", "kv_cache"])
        llm.resume_memory_occupation(tags=["weights"])
        llm.resume_memory_occupation(tags=["kv_cache"])
    if between in ("flush", "handover") and not llm.flush_cache().success:
        raise RuntimeError("SGLang kept its prefix cache between rounds")


def timed_rounds(model: str, requests: list[list[int]], sampling: dict, tp: int, share: float, engine: dict,
                 variants: dict[str, Variant], rounds: int = 3, py_spy: Path | None = None) -> dict[str, dict]:
    """Per variant: every round's seconds, their median, min and max, the tokens generated and tokens/s at the
    median. `engine`: the engine's arguments beyond the model, TP size and memory share. With `py_spy` (a folder;
    py-spy on PATH), each variant's last round samples every process of the engine (this one, its schedulers and
    detokenizer) into `<variant>-<pid>.txt`, py-spy's collapsed stacks: where the engine's host time goes."""
    import sglang

    if any(v.between == "handover" for v in variants.values()) and not engine.get("enable_memory_saver"):
        raise ValueError("a handover variant releases the engine's memory: pass enable_memory_saver in the engine")
    llm = sglang.Engine(model_path=model, tp_size=tp, mem_fraction_static=share, skip_tokenizer_init=True,
                        dtype="bfloat16", log_level="error", **engine)
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    generated: dict[str, int] = {}
    try:
        for variant in variants.values():  # warm-up: kernels, CUDA graphs, each variant's code path
            llm.generate(input_ids=requests, sampling_params=sampling,
                         return_logprob=variant.return_logprob(len(requests)))
        for index in range(rounds):
            for name, variant in variants.items():
                before_round(llm, variant.between)
                sampled = py_spy is not None and index == rounds - 1
                samplers = sample_engine(llm, py_spy / name, 2 * max(seconds[name]) + 1) if sampled else []
                start = time.perf_counter()
                outputs = llm.generate(input_ids=requests, sampling_params=sampling,
                                       return_logprob=variant.return_logprob(len(requests)))
                seconds[name].append(time.perf_counter() - start)
                generated[name] = sum(o["meta_info"]["completion_tokens"] for o in outputs)
                for sampler in samplers:
                    sampler.wait()
    finally:
        llm.shutdown()
    return {name: summary(seconds[name], generated[name], variants[name]) for name in variants}


def sample_engine(llm, prefix: Path, seconds: float) -> list[subprocess.Popen]:
    """py-spy on this process and each of the engine's for `seconds`, from now (after a moment for it to attach)."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    samplers = [subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--duration", str(math.ceil(seconds)),
                                  "--rate", "500", "--format", "raw", "--nonblocking", "--output",
                                  f"{prefix}-{pid}.txt"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for pid in [os.getpid(), *llm.get_all_child_pids()]]
    time.sleep(0.5)
    return samplers


def summary(seconds: list[float], generated: int, variant: Variant) -> dict:
    median = statistics.median(seconds)
    return {"gen_s": median, "gen_s_rounds": seconds, "gen_s_min": min(seconds), "gen_s_max": max(seconds),
            "gen_tokens": generated, "gen_tokens_per_s": generated / median, **asdict(variant)}
