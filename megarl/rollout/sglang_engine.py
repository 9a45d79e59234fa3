"""The production rollout backend: one `sglang.Engine` per rollout tensor-parallel group, colocated with the
trainer on the same GPUs.

The group's first rank owns the engine; its scheduler processes run on the group's GPUs (`base_gpu_id` and
`gpu_id_step` follow `parallel.engines.engine_slots`, so engine rank j is the GPU whose training shards make its
slice). Weights arrive in SGLang's own per-rank parameter layout (`load_format="direct"`): each rank converts
its slice (q/k/v fused into `qkv_proj`, gate/up into `gate_up_proj`) and hands the engine a CUDA IPC handle,
so the scheduler on the same GPU reads the tensor in place; only the handles travel, over the group's gloo
group, to the owner. Memory is released with `torch_memory_saver` (`enable_memory_saver`) around training.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import signal
import threading
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.distributed as dist

from megarl.models.hf_names import hf_expert
from megarl.models.shapes import experts_of, heads_split_problem
from megarl.rollout.base import (KV_CACHE, MEMORY_TAGS, ROLLOUT_BACKENDS, EngineDied, OnResponse, Response,
                                 RolloutEngine, SamplingParams)
from megarl.rollout.routing import decode_sglang_routing
from parallel.engines import EngineExperts

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # what megarl stops on (megarl/recipe_command.py)
SGLANG_VOCAB_PADDING = 64  # SGLang pads the vocabulary to this multiple before splitting it over TP ranks
_QKV = re.compile(r"(.*\.self_attn\.)([qkv])_proj\.(weight|bias)$")
_GATE_UP = re.compile(r"(.*\.mlp\.)(gate|up)_proj\.weight$")


def fuse_for_sglang(parts: list) -> list[tuple[str, torch.Tensor]]:
    """HF-named slices → SGLang's parameter names and per-rank layout: [q; k; v] as `qkv_proj`, [gate; up] as
    `gate_up_proj`, everything else as it is. A fused parameter's pieces must come in one bucket."""
    fused: dict[str, dict[str, torch.Tensor]] = {}
    out = []
    for name, tensor, _ in parts:
        if match := _QKV.match(name):
            key = f"{match[1]}qkv_proj.{match[3]}"
            fused.setdefault(key, {})[match[2]] = tensor
            if len(fused[key]) == 3:
                out.append((key, torch.cat([fused[key][p] for p in "qkv"])))
                del fused[key]
        elif match := _GATE_UP.match(name):
            key = f"{match[1]}gate_up_proj.weight"
            fused.setdefault(key, {})[match[2]] = tensor
            if len(fused[key]) == 2:
                out.append((key, torch.cat([fused[key]["gate"], fused[key]["up"]])))
                del fused[key]
        else:
            out.append((name, tensor))
    if fused:
        raise ValueError(f"incomplete fused parameters in a weight bucket: {sorted(fused)}")
    return out


# SGLang pickles its arguments, the SIGQUIT handler among them, into its scheduler processes: a bound method would
# take the engine along, its process group included (which does not pickle), so the handler names the engine by id.
_ENGINES: weakref.WeakValueDictionary[int, SGLangEngine] = weakref.WeakValueDictionary()


def _on_child_died(engine_id: int, signum, frame) -> None:
    if (engine := _ENGINES.get(engine_id)) is not None:
        engine._child_died(signum, frame)


def sigquit_handler(engine: SGLangEngine) -> Callable:
    """`engine._child_died`, as a handler that pickles whatever the engine holds."""
    _ENGINES[id(engine)] = engine
    return functools.partial(_on_child_died, id(engine))


@ROLLOUT_BACKENDS.register("sglang")
class SGLangEngine(RolloutEngine):
    def __init__(self, model_path: str, *, engine_ranks: Sequence[int], local_devices: Sequence[int], group=None,
                 vocab_size: int, num_kv_heads: int, mem_fraction_static: float = 0.5, dtype: str = "bfloat16",
                 seed: int = 0, engine_kwargs: dict[str, Any] | None = None,
                 routing_shape: tuple[int, int] | None = None, num_experts: int = 0):
        """`local_devices[i]`: the CUDA device index (as this process counts them) of engine rank i's GPU; `group`:
        a gloo group of `engine_ranks`, over which the other ranks hand their IPC handles to the owner.
        `routing_shape`: (layers, experts per token) of a model whose routing each response returns (R3).
        `num_experts`: a mixture-of-experts model's routed experts (0: dense); an engine of several GPUs splits them
        over its ranks whole (SGLang's expert parallelism, `ep_size`), each rank taking its own from the reshard."""
        super().__init__()
        self.engine_ranks, self.group, self.routing_shape = list(engine_ranks), group, routing_shape
        tp = len(self.engine_ranks)
        if vocab_size % SGLANG_VOCAB_PADDING:
            raise ValueError(f"vocab size {vocab_size} is not a multiple of {SGLANG_VOCAB_PADDING}: SGLang's "
                             "vocabulary shards would not line up with the trainer's")
        if problem := heads_split_problem(tp, num_kv_heads):
            raise ValueError(f"rollout TP {tp} {problem}: SGLang would replicate heads where the reshard layer "
                             "splits them")
        if num_experts and tp > 1:
            if num_experts % tp:
                raise ValueError(f"rollout TP {tp} must divide the model's {num_experts} experts: an engine of several "
                                 "GPUs holds each expert whole on one of them")
            self.experts = EngineExperts(num_experts // tp)
        steps = {b - a for a, b in zip(local_devices, local_devices[1:])}
        if len(steps) > 1 or (steps and steps.pop() <= 0):
            raise ValueError(f"an engine's GPUs must be evenly spaced and increasing, got {list(local_devices)}")
        self.engine, self.died, self.in_call, self.held_signal = None, None, False, None
        if dist.get_rank() == self.engine_ranks[0]:
            import sglang

            from parallel.topology import free_port

            step = local_devices[1] - local_devices[0] if tp > 1 else 1
            args = dict(
                model_path=model_path, tp_size=tp, base_gpu_id=local_devices[0], gpu_id_step=step,
                mem_fraction_static=mem_fraction_static, enable_memory_saver=True, skip_tokenizer_init=True,
                dtype=dtype, random_seed=seed, port=free_port(), log_level="error",
                custom_sigquit_handler=sigquit_handler(self),
            )
            if routing_shape is not None:
                args["enable_return_routed_experts"] = True
            if self.experts.per_rank is not None:
                args["ep_size"] = tp
            args.update(engine_kwargs or {})
            # Under torchrun this variable makes every process group rendezvous through torchrun's store, which
            # the engine's scheduler processes cannot reach: they would wait for it forever.
            agent_store = os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)
            stops = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}  # megarl's stop, or the defaults
            try:
                self.engine = sglang.Engine(**args)
            finally:
                if agent_store is not None:
                    os.environ["TORCHELASTIC_USE_AGENT_STORE"] = agent_store
            self.stops = stops
            self.deterministic = bool(args.get("enable_deterministic_inference", False))
            self._take_signals_back()

    def _child_died(self, signum, frame) -> None:
        """SGLang's subprocess watchdog signals (SIGQUIT) this process when a scheduler or the detokenizer exits
        abnormally; its own handler would kill this process, and the trainer with it. Here the engine is marked
        dead, and a call waiting on it is ended by stopping the engine's event loop (an exception raised here would
        not reach the call: uvloop logs and drops it); `_engine_call` turns the call's failure into EngineDied."""
        self.died = "an SGLang scheduler or detokenizer process exited abnormally (killed, out of memory, a GPU fault)"
        if self.in_call:
            self.engine.loop.stop()

    @contextmanager
    def _engine_call(self) -> Iterator[None]:
        """Around every call into the engine on the owner: EngineDied, not a wait on dead processes; and a stop signal
        that arrives during the call is held until the engine's event loop has returned, then raised again for
        megarl's own handler (an exception raised inside the loop would not reach the caller: uvloop drops it)."""
        if self.died:
            raise EngineDied(self.died)
        main = threading.current_thread() is threading.main_thread()
        self.held_signal = None
        if main:
            for signum in self.stops:
                signal.signal(signum, self._hold_signal)
        self.in_call = True
        try:
            yield
        except Exception as e:
            if self.died:
                raise EngineDied(self.died) from e
            if self.held_signal is None:  # a call the held signal stopped ends in the stop, not in its error
                raise
        finally:
            self.in_call = False
            if main:
                for signum, handler in self.stops.items():
                    signal.signal(signum, handler)
            if self.held_signal is not None:
                signal.raise_signal(self.held_signal)

    def _hold_signal(self, signum, frame) -> None:
        self.held_signal = signum
        if self.engine.loop.is_running():
            self.engine.loop.stop()

    def _take_signals_back(self) -> None:
        """SGLang's tokenizer manager puts SIGQUIT and SIGTERM handlers of its own on the engine's event loop when
        it starts its request loop, ignoring `custom_sigquit_handler`: the first kills this process, the second
        drains the engine and then kills it, so neither a dead scheduler nor a stop would reach megarl. Start that
        loop now and take both signals back (main thread only: where Python runs signal handlers, and where the
        engine was built). uvloop forgets a handler only while its loop runs, so the removal runs inside it."""
        if threading.current_thread() is not threading.main_thread():
            return

        async def start_and_remove() -> None:
            self.engine.tokenizer_manager.auto_create_handle_loop()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGQUIT, signal.SIGTERM):
                loop.remove_signal_handler(signum)

        self.engine.loop.run_until_complete(start_and_remove())
        signal.signal(signal.SIGQUIT, self._child_died)
        signal.signal(signal.SIGTERM, self.stops[signal.SIGTERM])

    @classmethod
    def from_config(cls, rollout, model_path, *, engine_ranks, group, local_devices, hf_config,
                    seed, record_routing: bool = False) -> SGLangEngine:
        """Engine arguments from the recipe: `rollout.gpu_memory_utilization` is SGLang's mem_fraction_static,
        `rollout.engine_kwargs` pass through (attention_backend, cuda_graph_max_bs_decode, ...)."""
        return cls(model_path, engine_ranks=engine_ranks, local_devices=local_devices, group=group,
                   vocab_size=hf_config.vocab_size, num_kv_heads=hf_config.num_key_value_heads,
                   mem_fraction_static=rollout.gpu_memory_utilization, seed=seed,
                   engine_kwargs=dict(rollout.engine_kwargs),
                   routing_shape=(hf_config.num_hidden_layers, hf_config.num_experts_per_tok) if record_routing
                   else None, num_experts=experts_of(hf_config.to_dict()))

    @property
    def is_owner(self) -> bool:
        return self.engine is not None

    def load_weights(self, parts: list) -> None:
        from sglang.srt.model_executor.model_runner_components.weight_updater import LocalSerializedTensor
        from sglang.srt.utils import MultiprocessingSerializer
        from sglang.srt.utils.patch_torch import monkey_patch_torch_reductions

        self.memory.check_can_load()
        monkey_patch_torch_reductions()  # IPC handles name the GPU by UUID, whatever each process's device order
        tensors = fuse_for_sglang(parts)
        mine = [(name, MultiprocessingSerializer.serialize(t.detach())) for name, t in tensors]
        if len(self.engine_ranks) > 1:
            gathered = [None] * len(self.engine_ranks) if self.is_owner else None
            dist.gather_object(mine, gathered, dst=self.engine_ranks[0], group=self.group)
        else:
            gathered = [mine]
        if self.is_owner:
            named = [(name, LocalSerializedTensor(values=[rank_parts[i][1] for rank_parts in gathered]))
                     for i, (name, _) in enumerate(mine)]
            # SGLang holds a layer's experts fused (FusedMoE's w13/w2): its model's own loader places each expert's
            # whole tensors (on several ranks, each rank's own experts: the others' placeholders it skips, as it
            # skips a checkpoint's experts of other ranks); everything else is copied into place by name.
            by_loader: dict[str | None, list] = {"direct": [], None: []}
            for name, tensor in named:
                by_loader[None if hf_expert(name) else "direct"].append((name, tensor))
            for load_format, batch in by_loader.items():
                if batch:
                    self._update_weights(batch, load_format)
        if len(self.engine_ranks) > 1:
            dist.barrier(group=self.group)  # the engine has copied every rank's tensors: they may be freed
        self.memory.weights_loaded = True

    def _update_weights(self, named: list, load_format: str | None) -> None:
        with self._engine_call():
            success, message = self.engine.update_weights_from_tensor(named, load_format=load_format,
                                                                      flush_cache=False)
        if not success:
            raise RuntimeError(f"SGLang refused the weights: {message}")

    def release_memory(self, tags: Sequence[str] = MEMORY_TAGS) -> None:
        super().release_memory(tags)
        if self.is_owner:
            with self._engine_call():
                self.engine.release_memory_occupation(tags=list(tags))

    def resume_memory(self, tags: Sequence[str] = MEMORY_TAGS) -> None:
        super().resume_memory(tags)
        if self.is_owner:
            with self._engine_call():
                self.engine.resume_memory_occupation(tags=list(tags))
        if KV_CACHE in tags:
            self.flush_cache()  # cached prefixes point into memory that was given away

    def flush_cache(self) -> None:
        if self.is_owner:
            with self._engine_call():
                if not self.engine.flush_cache().success:
                    raise RuntimeError("SGLang kept its prefix cache: requests were still running when it was flushed")

    def check_weights(self, action: str) -> tuple[bool, str]:
        """SGLang's weight checker on the owner: "snapshot", "reset_tensors" (poison them), "compare" (against
        the snapshot, exactly)."""
        from sglang.srt.managers.io_struct import CheckWeightsReqInput

        success, message, _, _ = self.engine.loop.run_until_complete(
            self.engine.tokenizer_manager.check_weights(CheckWeightsReqInput(action=action), None))
        return success, message

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 on_response: OnResponse | None = None) -> list[list[Response]]:
        """One batched call; with `on_response`, one request per response (SGLang schedules them alike: they are
        the same requests, handed over one by one), each reported as it finishes. Each request's `sampling_seed`
        (seed + its index) is used only with `enable_deterministic_inference`."""
        if not self.is_owner:
            raise RuntimeError("generate runs on the engine's first rank")
        self.memory.check_can_generate()
        sampling, request = self._sampling(params), self._request(params)
        seeded = params.seed is not None and self.deterministic
        if on_response is not None:
            responses = self._generate_each(prompts, params.n, sampling, request,
                                            params.seed if seeded else None, on_response)
        elif seeded:  # per-sample seeds
            requests = [list(p) for p in prompts for _ in range(params.n)]
            per_request = [{**sampling, "sampling_seed": params.seed + i} for i in range(len(requests))]
            with self._engine_call():
                outputs = self.engine.generate(input_ids=requests, sampling_params=per_request, **request)
            responses = [_response(out, self.routing_shape) for out in outputs]
        else:
            with self._engine_call():
                outputs = self.engine.generate(input_ids=[list(p) for p in prompts],
                                               sampling_params={**sampling, "n": params.n}, **request)
            responses = [_response(out, self.routing_shape) for out in outputs]
        return [responses[i * params.n : (i + 1) * params.n] for i in range(len(prompts))]

    def _request(self, params: SamplingParams) -> dict[str, Any]:
        """A request's arguments beyond its tokens and sampling: the sampled tokens' log-probs where asked for, and
        with router replay the routed experts over the whole sequence (start 0: the prompt's too)."""
        return {"return_logprob": params.logprobs,
                **({"return_routed_experts": True} if self.routing_shape is not None else {})}

    @staticmethod
    def _sampling(params: SamplingParams) -> dict[str, Any]:
        """SGLang's sampling parameters of one request (n apart)."""
        return {"temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k,
                "max_new_tokens": params.max_new_tokens, "stop_token_ids": list(params.stop_token_ids),
                "ignore_eos": params.ignore_eos, "no_stop_trim": True, "skip_special_tokens": False}

    def _generate_each(self, prompts: Sequence[Sequence[int]], n: int, sampling: dict, request: dict,
                       seed: int | None, on_response: OnResponse) -> list[Response]:
        """Every response as a request of its own through the engine's asynchronous API, in prompt-major order."""

        async def one(i: int, k: int) -> Response:
            per_request = sampling if seed is None else {**sampling, "sampling_seed": seed + i * n + k}
            output = await self.engine.async_generate(input_ids=list(prompts[i]), sampling_params=per_request,
                                                      **request)
            response = _response(output, self.routing_shape)
            on_response(i, k, response)
            return response

        async def every() -> list[Response]:
            return list(await asyncio.gather(*(one(i, k) for i in range(len(prompts)) for k in range(n))))

        with self._engine_call():
            return self.engine.loop.run_until_complete(every())

    def run_async(self, work):
        if not self.is_owner:
            raise RuntimeError("generation runs on the engine's first rank")
        self.memory.check_can_generate()
        with self._engine_call():
            return self.engine.loop.run_until_complete(work)

    async def generate_one(self, prompt: Sequence[int], params: SamplingParams) -> Response:
        """A request of its own: SGLang batches it with the others in flight."""
        sampling = {**self._sampling(params), **({"sampling_seed": params.seed} if self.deterministic
                                                 and params.seed is not None else {})}
        output = await self.engine.async_generate(input_ids=list(prompt), sampling_params=sampling,
                                                  **self._request(params))
        return _response(output, self.routing_shape)

    def next_token_logprobs(self, prompts: Sequence[Sequence[int]], token_ids: Sequence[int]) -> list[list[float]]:
        """One token generated per prompt at temperature 1 (so the log-probs are the untempered distribution's) with
        SGLang's `token_ids_logprob`: the first output position's log-probs of `token_ids`, in their order."""
        if not self.is_owner:
            raise RuntimeError("next_token_logprobs runs on the engine's first rank")
        self.memory.check_can_generate()
        wanted = list(token_ids)
        sampling = {"max_new_tokens": 1, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "skip_special_tokens": False}
        with self._engine_call():
            outputs = self.engine.generate(input_ids=[list(p) for p in prompts], sampling_params=sampling,
                                           return_logprob=True, token_ids_logprob=[wanted] * len(prompts))
        return [_first_token_logprobs(output, wanted) for output in outputs]

    def start_profile(self, directory: str) -> None:
        """The schedulers' CPU ops and kernels, one trace per engine rank: `directory`/engine-TP-<rank>.trace.json.gz."""
        if self.is_owner:
            with self._engine_call():
                self.engine.start_profile(output_dir=directory, activities=["CPU", "GPU"], profile_id="engine")

    def stop_profile(self) -> None:
        if self.is_owner:
            with self._engine_call():
                self.engine.stop_profile()

    def shutdown(self) -> None:
        if self.engine is None:
            return
        if self.died:  # only what is left of this engine: SGLang's own shutdown ends every child of this process
            from sglang.srt.utils import kill_process_tree

            for pid in self.engine.get_all_child_pids():
                kill_process_tree(pid, wait_timeout=60)  # reaped: its GPU memory is free for the next engine
        else:
            self.engine.shutdown()
        self.engine = None


def _response(output: dict, routing_shape: tuple[int, int] | None = None) -> Response:
    meta = output["meta_info"]
    reason = meta["finish_reason"]["type"]
    if reason not in ("stop", "length"):
        raise RuntimeError(f"SGLang aborted a request: {meta['finish_reason']}")
    routed = None if routing_shape is None else decode_sglang_routing(meta, routing_shape)
    logprobs = meta.get("output_token_logprobs")
    return Response(list(output["output_ids"]), None if logprobs is None else [lp for lp, _, _ in logprobs], reason,
                    routed_experts=routed)


def _first_token_logprobs(output: dict, token_ids: list[int]) -> list[float]:
    """SGLang's `output_token_ids_logprobs` of the first output position, (logprob, token id, text) each, in the
    order of `token_ids`."""
    by_id = {token: logprob for logprob, token, *_ in output["meta_info"]["output_token_ids_logprobs"][0]}
    return [by_id[token] for token in token_ids]
