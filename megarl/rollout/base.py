"""The rollout interface every backend implements, and what it returns.

An engine spans one rollout tensor-parallel group of GPUs (`parallel.engines.engine_slots`); every rank of the
group holds the engine object, the group's first rank (the owner) generates. Weights come in through
`load_weights`, fed bucket by bucket by the reshard layer on every rank of the group. Between generations
the engine's memory is released (`release_memory`) so training has the GPU; before the next generation the
weights are resumed and loaded first, the KV cache second (it is the large part).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Optional, Sequence, TypeVar

from megarl.registry import Registry
from parallel.controller import RecoverableError
from parallel.engines import EngineExperts

if TYPE_CHECKING:  # the config's validator imports this registry
    import torch

    from megarl.config.schema import RolloutConfig

ROLLOUT_BACKENDS: Registry[type] = Registry("rollout backend")
T = TypeVar("T")

WEIGHTS, KV_CACHE = "weights", "kv_cache"
MEMORY_TAGS = (WEIGHTS, KV_CACHE)


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1  # responses per prompt
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = -1  # -1: the whole vocabulary
    max_new_tokens: int = 512
    stop_token_ids: tuple[int, ...] = ()  # besides the tokenizer's end-of-sequence token
    ignore_eos: bool = False
    seed: Optional[int] = None
    logprobs: bool = True  # the engine returns each sampled token's log-prob (what it costs: docs/rollout.md)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @classmethod
    def for_training(cls, rollout, max_new_tokens: int, seed: Optional[int] = None) -> SamplingParams:
        """From the recipe's `rollout` section."""
        return cls(n=rollout.n, temperature=rollout.temperature, top_p=rollout.top_p, top_k=rollout.top_k,
                   max_new_tokens=max_new_tokens, ignore_eos=rollout.ignore_eos, seed=seed,
                   logprobs=rollout.calculate_log_probs)

    @classmethod
    def for_validation(cls, rollout, max_new_tokens: int, seed: Optional[int] = None) -> SamplingParams:
        """From `rollout.val_kwargs`: greedy unless it sets do_sample; no log-probs (validation scores text)."""
        val = rollout.val_kwargs
        temperature = val.temperature if val.do_sample else 0.0
        return cls(n=val.n, temperature=temperature, top_p=val.top_p, top_k=val.top_k,
                   max_new_tokens=max_new_tokens, seed=seed, logprobs=False)


@dataclass
class AgentStats:
    """A multi-turn trajectory's turns and tool calls (megarl/agent/loop.py)."""

    assistant_turns: int = 0
    tool_calls: int = 0  # calls that ran (a malformed one is an error, not a call)
    tool_errors: int = 0  # malformed calls, unknown tools, tools that raised
    tool_timeouts: int = 0
    tool_seconds: float = 0.0  # this trajectory's calls, summed
    engine_tool_wall_s: float = 0.0  # its engine's wall time with a tool call running, the same on each sample


@dataclass
class Response:
    token_ids: list[int]
    # log p(token) under the sampling temperature, before top-k/top-p truncation; 0 on tool tokens; None where the
    # request asked for none (SamplingParams.logprobs)
    logprobs: Optional[list[float]]
    finish_reason: str  # "stop" (end-of-sequence or a stop token, which is kept) | "length"; multi-turn: answer,
    # max_turns or max_tokens
    loss_mask: Optional[list[int]] = None  # multi-turn: 1 on the model's tokens, 0 on tool tokens; None: all the model's
    agent: Optional[AgentStats] = None  # multi-turn only
    # With the engine's routing recorded (router replay, R3): the experts each token it forwarded went to,
    # [prompt + response − 1, MoE layers, top-k] int (the last sampled token is never forwarded)
    routed_experts: Optional[torch.Tensor] = None


OnResponse = Callable[[int, int, Response], None]


class EngineDied(RecoverableError):
    """The engine's generation processes died (e.g. a scheduler killed by the OOM killer or a GPU fault); the
    engine object is unusable and the rollout role builds a new one (megarl/trainer/recovery.py). The trainer's
    process group is intact, so the workers go on."""


class EngineFailure(RuntimeError):
    """The rollout engine died again right after a restart: the run stops with the cause."""


def rollout_backend(name: str) -> type[RolloutEngine]:
    """The engine class `rollout.name` names: a registered backend, or user code as 'path/to/file.py:Class' or
    'package.module:Class' (a RolloutEngine subclass)."""
    from megarl.plugins import registered_or_user_class

    return registered_or_user_class(name, ROLLOUT_BACKENDS, "rollout.name", RolloutEngine,
                                    "megarl.rollout.RolloutEngine")


class EngineMemory:
    """Which of the engine's memory regions are released, with the errors SGLang would give, clearer."""

    def __init__(self):
        self.released: set[str] = set()
        self.weights_loaded = True

    def release(self, tags: Sequence[str]) -> None:
        for tag in tags:
            if tag not in MEMORY_TAGS:
                raise ValueError(f"unknown memory tag {tag!r}: use {MEMORY_TAGS}")
            if tag in self.released:
                raise RuntimeError(f"the engine's {tag} memory is already released")
        self.released.update(tags)
        if WEIGHTS in tags:
            self.weights_loaded = False

    def resume(self, tags: Sequence[str]) -> None:
        for tag in tags:
            if tag not in self.released:
                raise RuntimeError(f"the engine's {tag} memory was not released, so it cannot be resumed")
        self.released.difference_update(tags)

    def check_can_load(self) -> None:
        if WEIGHTS in self.released:
            raise RuntimeError("weights are loaded into released memory: resume_memory(['weights']) first")

    def check_can_generate(self) -> None:
        if self.released:
            raise RuntimeError(f"generate needs the engine's memory: resume {sorted(self.released)} first")
        if not self.weights_loaded:
            raise RuntimeError("the engine's weights were released and not loaded again: sync weights first")


class RolloutEngine(ABC):
    def __init__(self):
        self.memory = EngineMemory()
        self.experts = EngineExperts()  # a mixture-of-experts model's experts on each engine rank: all of them
        self._one_at_a_time: asyncio.Lock | None = None  # generate_one's, made on the loop run_async runs

    @classmethod
    @abstractmethod
    def from_config(cls, rollout: RolloutConfig, model_path: str, *, engine_ranks: Sequence[int], group,
                    local_devices: Sequence[int], hf_config, seed: int, **options: Any) -> RolloutEngine:
        """The engine of the recipe's `rollout` section serving the model at `model_path`, on `engine_ranks`
        (training ranks, engine-rank order; `local_devices`: their CUDA device indices), `group` being a gloo
        group of those ranks (None for one). `options`: `record_routing=True` (router replay, R3) asks for each
        response's `routed_experts`; it is passed only then, so an engine without routing need not take it."""

    @property
    @abstractmethod
    def is_owner(self) -> bool:
        """Whether this rank generates for the engine."""

    @abstractmethod
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 on_response: OnResponse | None = None) -> list[list[Response]]:
        """On the owner: `params.n` responses for each prompt (token ids). With `on_response` (the async mode),
        `on_response(prompt index, sample index, response)` as each response finishes, while the others are still
        generating; the responses are those the call without it would return."""

    def run_async(self, work: Coroutine[Any, Any, T]) -> T:
        """Run `work`, a coroutine that awaits `generate_one` (the agent loop's trajectories), to its end on the
        event loop the engine's asynchronous API lives on."""

        async def serialised() -> T:
            self._one_at_a_time = asyncio.Lock()  # of this loop
            return await work

        return asyncio.run(serialised())

    async def generate_one(self, prompt: Sequence[int], params: SamplingParams) -> Response:
        """One response to `prompt` (`params.n` is ignored), awaited inside `run_async` while other trajectories'
        requests are in flight. By default the synchronous `generate` in a thread, one call at a time (the engine's
        own calls are not reentrant); tools and the other trajectories' bookkeeping run meanwhile."""
        if self._one_at_a_time is None:
            raise RuntimeError("generate_one runs inside run_async")
        async with self._one_at_a_time:
            groups = await asyncio.to_thread(self.generate, [list(prompt)], replace(params, n=1))
        return groups[0][0]

    def next_token_logprobs(self, prompts: Sequence[Sequence[int]], token_ids: Sequence[int]) -> list[list[float]]:
        """On the owner: for each prompt, the log-probs (temperature 1, the whole vocabulary) of `token_ids` as the
        token that follows it: what a judge read as yes/no reads instead of a sampled word."""
        raise NotImplementedError(f"the rollout backend {type(self).__name__} cannot read next-token log-probs: "
                                  "implement next_token_logprobs, or judge with reward.judge.parse.type=last_number "
                                  "or regex")

    @abstractmethod
    def load_weights(self, parts: list) -> None:
        """Collective over the engine's ranks: this rank's (HF name, tensor or tensor-parallel slice, dim) parts,
        as the reshard layer streams them."""

    def flush_cache(self) -> None:
        """After new weights were loaded into an engine that kept its memory: forget what it computed with the old
        ones (SGLang's radix cache of prompt prefixes, whose KV a later request would reuse). Nothing to forget
        unless a backend caches."""

    def shutdown(self) -> None:
        """Stop what the engine runs outside this process (nothing, unless a backend says otherwise)."""

    def start_profile(self, directory: str) -> None:
        """Record what the engine runs outside this process with torch's profiler until `stop_profile`, into
        `directory`. Nothing, unless a backend runs outside this process: this process's own recording
        (`trainer.profile_steps`) holds the rest."""

    def stop_profile(self) -> None:
        """End `start_profile`'s recording and write it."""

    def release_memory(self, tags: Sequence[str] = MEMORY_TAGS) -> None:
        self.memory.release(tags)

    def resume_memory(self, tags: Sequence[str] = MEMORY_TAGS) -> None:
        self.memory.resume(tags)
