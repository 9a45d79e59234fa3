"""The rollout role: one engine rank per GPU (parallel/engines.py places the engines; the group's first rank generates
for the prompts dispatched to its engine), in one of two placements, each a class of its own:

- `ColocatedRolloutWorker`: beside the actor on its GPUs, whose weights it streams in through the reshard layer
  (parallel/reshard.py); the engine releases its memory while the trainer has the GPU and takes it back for the sync.
- `PooledRolloutWorker`: on GPUs of its own (`rollout.enable_resource_pool`); the weights come over the bridge
  (parallel/weight_bridge.py) and the engine keeps its memory."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

import torch
import torch.distributed as dist

from megarl.agent import AgentLoop, ToolContext, build_tools
from megarl.columns import (AGENT_STATS, DATA_SOURCE, EXTRA_INFO, FINISH_REASON, JUDGE_AFTER_GEN_S, PROMPT_IDS,
                            RAW_PROMPT, RESPONSE_MASK, RESPONSES, REWARD_MODEL, REWARD_OUTCOME, ROLLOUT_LOG_PROBS,
                            ROUTED_EXPERTS, stage)
from megarl.models.bridge import load_hf_config
from megarl.models.to_hf import hf_converter
from megarl.models.tokenizer import load_tokenizer
from megarl.rewards.scorer import RewardScorer
from megarl.rewards.stream import StreamingScorer
from megarl.rollout.base import (KV_CACHE, MEMORY_TAGS, WEIGHTS, OnResponse, Response, RolloutEngine,
                                 SamplingParams, rollout_backend)
from megarl.rollout.batch import ground_truths, rule_scored, with_responses
from megarl.workers.actor import ActorWorker
from megarl.workers.inputs import RolloutInputs, model_path
from megarl.workers.judge import JUDGED, JudgeWorker, StreamingJudge
from parallel.batch import Batch
from parallel.weight_bridge import WeightBridge
from parallel.dispatch import Collect, Dispatch, RankLayout, worker_method
from parallel.engines import place_engines
from parallel.worker import Worker


class RolloutWorker(Worker):
    """What both placements share: the engine, its generation (and the async mode's scoring beside it), its
    profile."""

    def __init__(self, inputs: RolloutInputs, engine_tp_of_slots: int, judge: JudgeWorker | None = None):
        """`engine_tp_of_slots`: the tensor-parallel size whose groups the engines' slots follow (the actor's
        beside it, the engines' own on a pool of their own); `judge`: the judge in this process, which the async
        mode hands each response to as it finishes (MegaRLConfig.judge_streams)."""
        self.inputs, self.judge = inputs, judge
        self.placement = place_engines(engine_tp_of_slots, inputs.rollout.tensor_model_parallel_size)
        self.model_path = model_path(inputs.model_path, "model.path")
        self.hf_config = load_hf_config(self.model_path)
        self.engine = self._build_engine()
        streaming = inputs.streaming_reward
        # The async mode scores on the engine's owner, beside its generation.
        self.scorer = (RewardScorer.from_config(load_tokenizer(streaming.model), streaming.reward, streaming.output_log)
                       if streaming is not None and self.engine.is_owner else None)
        self.agent, self.tool_context = self._agent_loop() if self.engine.is_owner else (None, None)

    def _agent_loop(self) -> tuple[AgentLoop | None, ToolContext | None]:
        """With rollout.multi_turn: the agent loop, its tools."""
        agent = self.inputs.agent
        if agent is None:
            return None, None
        context = ToolContext(agent.sandbox)
        loop = AgentLoop(load_tokenizer(agent.model), agent.multi_turn, build_tools(agent.multi_turn.tools, context),
                         self.inputs.max_response_length, agent.max_total_tokens, agent.sandbox.workers)
        return loop, context

    def _generate(self, prompts: Batch, params: SamplingParams, on_response: OnResponse | None = None
                  ) -> list[list[Response]]:
        """The engine's responses, or with rollout.multi_turn the agent loop's trajectories."""
        ids = list(prompts[PROMPT_IDS])
        if self.agent is not None:
            return self.agent.generate(self.engine, ids, params, on_response)
        if on_response is None:  # a user's engine may implement only the sync mode's call
            return self.engine.generate(ids, params)
        return self.engine.generate(ids, params, on_response=on_response)

    def _build_engine(self) -> RolloutEngine:
        """This rank's part of its engine, its memory released."""
        slot, inputs = self.placement.slot, self.inputs
        options = {"record_routing": True} if inputs.record_routing else {}
        engine = rollout_backend(inputs.rollout.name).from_config(
            inputs.rollout, self.model_path, engine_ranks=slot.engine_ranks, group=self.placement.group,
            local_devices=self.placement.local_devices, hf_config=self.hf_config, seed=inputs.seed + slot.engine,
            **options)
        engine.release_memory(MEMORY_TAGS)
        return engine

    def layout(self) -> RankLayout:
        return RankLayout(self.placement.slot.engine, self.placement.engine_count, self.engine.is_owner)

    def close(self) -> None:
        self.engine.shutdown()
        if self.scorer is not None:
            self.scorer.close()
        if self.agent is not None:
            self.agent.close()
        if self.tool_context is not None:
            self.tool_context.close()

    @worker_method()
    def start_engine_profile(self, directory: str) -> None:
        """Record the engine's own processes (SGLang's schedulers) until `stop_engine_profile` (trainer.profile_steps)."""
        self.engine.start_profile(directory)

    @worker_method()
    def stop_engine_profile(self) -> None:
        self.engine.stop_profile()

    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    @stage(reads=(PROMPT_IDS,), writes=(RESPONSES, RESPONSE_MASK, FINISH_REASON),
           reads_if_present=(DATA_SOURCE, REWARD_MODEL, EXTRA_INFO, RAW_PROMPT),
           may_write=(ROLLOUT_LOG_PROBS, REWARD_OUTCOME, AGENT_STATS, *JUDGED, JUDGE_AFTER_GEN_S, ROUTED_EXPERTS))
    def generate(self, prompts: Batch, validate: bool = False, greedy: bool = False,
                 seed: int | None = None) -> Batch | None:
        """Responses to this engine's share of `prompts` (`prompt_ids` column): rollout.n each, the validation
        sampling of rollout.val_kwargs (`validate`), or one greedy response each (`greedy`: ReMax's baseline)."""
        if not self.engine.is_owner:
            return None
        max_new = self.inputs.max_response_length
        # Engines sample different prompts; distinct seeds keep their random streams apart too.
        seed = None if seed is None else seed + 100_003 * self.placement.slot.engine
        if greedy:
            params = SamplingParams(n=1, temperature=0.0, max_new_tokens=max_new, logprobs=False)
        else:
            make = SamplingParams.for_validation if validate else SamplingParams.for_training
            params = make(self.inputs.rollout, max_new, seed=seed)
        if self.scorer is None or validate or greedy:
            return with_responses(prompts, self._generate(prompts, params), width=max_new)
        return self._generate_scored(prompts, params, self.scorer)

    def _generate_scored(self, prompts: Batch, params: SamplingParams, scorer: RewardScorer) -> Batch:
        """The async mode: each response goes to the scorer (and the judge beside this engine) as it finishes, while
        the engine goes on with the others; the outcomes ride in the batch's `reward_outcome` (the driver's scoring
        stage reports and places them), the judge's verdicts in its columns."""
        n, truths, sources = params.n, ground_truths(prompts), list(prompts[DATA_SOURCE])
        extras = list(prompts[EXTRA_INFO]) if EXTRA_INFO in prompts else [None] * len(prompts)
        truth_only = self.inputs.streaming_reward is not None and self.inputs.streaming_reward.truth_only

        with StreamingScorer(scorer, len(prompts) * n) as stream, self._judging(len(prompts) * n) as judging:
            def finished(i: int, k: int, response: Response) -> None:
                if rule_scored(truths[i], truth_only):
                    stream.submit(i * n + k, response.token_ids, sources[i], truths[i], extras[i])
                if judging is not None:
                    judging.submit(i * n + k, prompts[RAW_PROMPT][i], response.token_ids, truths[i], extras[i])

            groups = self._generate(prompts, params, on_response=finished)
            generated_at = time.perf_counter()
            outcomes = stream.outcomes()
            judged = judging.judged(generated_at) if judging is not None else None
        batch = with_responses(prompts, groups, width=self.inputs.max_response_length)
        batch = batch.union(Batch(fields={REWARD_OUTCOME: outcomes}))
        return batch if judged is None else batch.union(judged)

    @contextmanager
    def _judging(self, count: int) -> Iterator[StreamingJudge | None]:
        """The judge beside this engine for a round's `count` responses, its memory taken for the round."""
        if self.judge is None:
            yield None
            return
        with self.judge.engine_memory() as judge, StreamingJudge(judge, count) as judging:
            yield judging


class ColocatedRolloutWorker(RolloutWorker):
    """Beside the actor (its role in this process, spawned with the actor's handle, and the judge's where the judge
    streams): its engine ranks follow the actor's tensor-parallel groups, and the engine gives its memory to
    training between generations (`release`, `resume`)."""

    def __init__(self, inputs: RolloutInputs, actor: ActorWorker, judge: JudgeWorker | None = None):
        super().__init__(inputs, inputs.train_tp, judge)
        self.actor = actor.model
        self.streamer = self.actor.weight_streamer(hf_converter(self.hf_config), self.placement.slot,
                                                   self.placement.slots, self.engine.experts)

    @worker_method()
    def release(self) -> None:
        """Give the engine's memory to training."""
        self.engine.release_memory(MEMORY_TAGS)

    @worker_method()
    def resume(self, tags: list[str]) -> None:
        """Take back those of the engine's memory regions `tags` names that are released (after a restart none
        is). The engine's allocator takes memory from the device, not from torch's cache: what the trainer freed
        (the sync's buckets too) goes back to the device first."""
        torch.cuda.empty_cache()  # a no-op where CUDA never started
        released = [tag for tag in tags if tag in self.engine.memory.released]
        if released:
            self.engine.resume_memory(released)

    @worker_method(collect=Collect.RANK_ZERO)
    def sync_weights(self) -> dict[str, float]:
        """Stream the actor's weights into the engine's (resumed) weights; returns the sync's metrics (rank 0's)."""
        with self.actor.weights_in_use():  # with param_offload the weights leave the GPU again afterwards
            stats = self.streamer.sync(self.engine.load_weights)
        return stats.metrics()

    @worker_method(collect=Collect.RANK_ZERO)
    def restart_engine(self) -> dict[str, float]:
        """After the engine died (EngineDied): stop what is left of it, build it again and give it the actor's
        current weights, on every rank of every engine (the weight stream is collective over the actor's ranks);
        returns the sync's metrics."""
        self.engine.shutdown()  # a dead engine's shutdown ends only what is left of it
        self.engine = self._build_engine()
        self.resume([WEIGHTS])
        metrics = self.sync_weights()
        self.resume([KV_CACHE])
        return metrics


class PooledRolloutWorker(RolloutWorker):
    """On GPUs of its own: engines of the rollout's own tensor-parallel size that keep their memory, the weights
    received over the bridge."""

    def __init__(self, inputs: RolloutInputs):
        super().__init__(inputs, inputs.rollout.tensor_model_parallel_size)
        self.engine.resume_memory(MEMORY_TAGS)
        self.bridge: WeightBridge | None = None

    @worker_method()
    def join_bridge(self, host: str, port: int, size: int, timeout_s: float) -> None:
        """This rank's end of the weight bridge (the actor's first rank is rank 0 of it)."""
        self.bridge = WeightBridge(host, port, 1 + dist.get_rank(), size, timeout_s)

    @worker_method(collect=Collect.RANK_ZERO)
    def receive_weights(self) -> dict[str, float]:
        """The actor's weights over the bridge, this engine rank's slice of each tensor."""
        if self.bridge is None:
            raise RuntimeError("receive_weights before join_bridge: the bridge has no end here yet")
        start, slot = time.perf_counter(), self.placement.slot
        for bucket in self.bridge.receive(slot.engine_rank, len(slot.engine_ranks)):
            self.engine.load_weights(bucket)
        self.engine.flush_cache()  # its memory stayed: prefixes cached with the old weights would be reused
        return {"update_weights/receive_s": time.perf_counter() - start}

    @worker_method()
    def idle(self) -> None:
        """Nothing: the call returns once every call sent to the rollout ranks before it has run."""
