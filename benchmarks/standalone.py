"""Standalone SGLang: one engine generates for a list of requests in timed rounds after a warm-up round, in one or
more variants of the request, interleaved round by round so that a drift of the machine touches every variant alike.
It is the baseline a colocated engine's generation is held to (rl_step.py, engine_probe.py, rollout_pool.py).

A variant says what each round asks and what comes before it:
- `logprobs`: each token's log-probability comes back with it, as megarl's rollout asks (`return_logprob`);
- `between`: "none" (the prompts' prefixes stay cached from the last round), "flush" (the prefix cache is emptied
  first, as after a colocated weight sync), or "handover" (the engine's weights and KV cache are released and resumed
  first, then its cache flushed: a colocated step's hand-over without the training; the engine needs
  `enable_memory_saver`, and `enable_weights_cpu_backup` so that it resumes the same weights).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

BETWEEN_ROUNDS = ("none", "flush", "handover")


@dataclass(frozen=True)
class Variant:
    logprobs: bool = False
    between: str = "none"

    def __post_init__(self):
        if self.between not in BETWEEN_ROUNDS:
            raise ValueError(f"between={self.between!r}: use one of {BETWEEN_ROUNDS}")


PLAIN = Variant()
AS_COLOCATED = Variant(logprobs=True, between="flush")  # what a colocated step's generation asks, after its sync
HANDOVER = Variant(logprobs=True, between="handover")
VARIANTS = {"plain": PLAIN, "as_colocated": AS_COLOCATED, "handover": HANDOVER}


def before_round(llm, between: str) -> None:
    if between == "handover":
        llm.release_memory_occupation(tags=["weights", "kv_cache"])
        llm.resume_memory_occupation(tags=["weights"])
        llm.resume_memory_occupation(tags=["kv_cache"])
    if between in ("flush", "handover") and not llm.flush_cache().success:
        raise RuntimeError("SGLang kept its prefix cache between rounds")


def timed_rounds(model: str, requests: list[list[int]], sampling: dict, tp: int, share: float, engine: dict,
                 variants: dict[str, Variant], rounds: int = 3) -> dict[str, dict]:
    """Per variant: every round's seconds, their median, min and max, the tokens generated and tokens/s at the
    median. `engine`: the engine's arguments beyond the model, TP size and memory share."""
    import sglang

    if any(v.between == "handover" for v in variants.values()) and not engine.get("enable_memory_saver"):
        raise ValueError("a handover variant releases the engine's memory: pass enable_memory_saver in the engine")
    llm = sglang.Engine(model_path=model, tp_size=tp, mem_fraction_static=share, skip_tokenizer_init=True,
                        dtype="bfloat16", log_level="error", **engine)
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    generated: dict[str, int] = {}
    try:
        for variant in variants.values():  # warm-up: kernels, CUDA graphs, each variant's code path
            llm.generate(input_ids=requests, sampling_params=sampling, return_logprob=variant.logprobs)
        for _ in range(rounds):
            for name, variant in variants.items():
                before_round(llm, variant.between)
                start = time.perf_counter()
                outputs = llm.generate(input_ids=requests, sampling_params=sampling, return_logprob=variant.logprobs)
                seconds[name].append(time.perf_counter() - start)
                generated[name] = sum(o["meta_info"]["completion_tokens"] for o in outputs)
    finally:
        llm.shutdown()
    return {name: summary(seconds[name], generated[name], variants[name]) for name in variants}


def summary(seconds: list[float], generated: int, variant: Variant) -> dict:
    median = statistics.median(seconds)
    return {"gen_s": median, "gen_s_rounds": seconds, "gen_s_min": min(seconds), "gen_s_max": max(seconds),
            "gen_tokens": generated, "gen_tokens_per_s": generated / median, **asdict(variant)}
