"""A rollout engine on HF transformers' `generate`: for CPU tests and debugging, fed by the same reshard layer as
SGLang. The owner holds the whole model; with rollout TP > 1 it assembles the slices its ranks receive (so the
tensor-parallel layouts the reshard layer produces are checked end to end). It is slow: one prompt at a time,
with no padding, so positions and log-probs are exactly the unpadded sequence's."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import torch
import torch.distributed as dist

from megarl.models.hf_names import hf_expert
from megarl.rollout.base import (KV_CACHE, ROLLOUT_BACKENDS, WEIGHTS, OnResponse, Response, RolloutEngine,
                                 SamplingParams)


def model_tensor(params: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    """The model's tensor that checkpoint tensor `name` fills: transformers 5 holds a layer's experts fused ([E, 2I, H]
    gate and up, [E, H, I] down, as its own checkpoint loading makes them), so an expert's is a view into those."""
    if name in params:
        return params[name]
    expert = hf_expert(name)
    if expert is None or f"{expert[0]}.down_proj" not in params:
        raise KeyError(f"the rollout model has no parameter {name}")
    experts, index, rest = expert
    if rest == "down_proj.weight":
        return params[f"{experts}.down_proj"][index]
    gate, up = params[f"{experts}.gate_up_proj"][index].chunk(2)
    return {"gate_proj.weight": gate, "up_proj.weight": up}[rest]


@ROLLOUT_BACKENDS.register("transformers")
class TransformersEngine(RolloutEngine):
    def __init__(self, model_path: str, *, engine_ranks: Sequence[int] = (0,), group=None,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu", record_routing: bool = False):
        """`record_routing`: each response carries its `routed_experts` (router replay, R3)."""
        super().__init__()
        self.engine_ranks, self.group, self.device = list(engine_ranks), group, torch.device(device)
        self.record_routing = record_routing
        rank = dist.get_rank() if dist.is_initialized() else engine_ranks[0]
        self.model = None
        if rank == self.engine_ranks[0]:
            from transformers import AutoModelForCausalLM

            self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(self.device).eval()
            self.eos_token_id = self.model.config.eos_token_id
            self.shapes = {name: (p.shape, p.dtype) for name, p in self.model.named_parameters()}

    @classmethod
    def from_config(cls, rollout, model_path, *, engine_ranks, group, local_devices, hf_config,
                    seed, record_routing: bool = False) -> TransformersEngine:
        cuda = torch.cuda.is_available()
        return cls(model_path, engine_ranks=engine_ranks, group=group,
                   dtype=torch.bfloat16 if cuda else torch.float32,
                   device=f"cuda:{local_devices[0]}" if cuda else "cpu", record_routing=record_routing)

    @property
    def is_owner(self) -> bool:
        return self.model is not None

    def load_weights(self, parts: list) -> None:
        self.memory.check_can_load()
        if len(self.engine_ranks) > 1:
            mine = [(name, tensor.cpu(), dim) for name, tensor, dim in parts]
            gathered = [None] * len(self.engine_ranks) if self.is_owner else None
            dist.gather_object(mine, gathered, dst=self.engine_ranks[0], group=self.group)
            if not self.is_owner:
                return
            parts = [(name, _assemble([rank_parts[i][1] for rank_parts in gathered], dim), dim)
                     for i, (name, _, dim) in enumerate(gathered[0])]
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, tensor, _ in parts:
                target = model_tensor(params, name)
                target.copy_(tensor.to(target.device))
        self.memory.weights_loaded = True

    def release_memory(self, tags=(WEIGHTS, KV_CACHE)) -> None:
        super().release_memory(tags)
        if self.is_owner and WEIGHTS in tags:
            for param in self.model.parameters():
                param.data = torch.empty(0, dtype=param.dtype, device=param.device)

    def resume_memory(self, tags=(WEIGHTS, KV_CACHE)) -> None:
        super().resume_memory(tags)
        if self.is_owner and WEIGHTS in tags:
            for name, param in self.model.named_parameters():
                shape, dtype = self.shapes[name]
                param.data = torch.empty(shape, dtype=dtype, device=self.device)

    def held_bytes(self) -> int:
        """Bytes of the owner's weights now in memory (0 while released)."""
        return sum(p.numel() * p.element_size() for p in self.model.parameters()) if self.is_owner else 0

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 on_response: OnResponse | None = None) -> list[list[Response]]:
        """A prompt's responses are sampled together, whichever the mode (so the async mode's samples are the
        sync mode's), and reported as their prompt finishes."""
        if not self.is_owner:
            raise RuntimeError("generate runs on the engine's first rank")
        self.memory.check_can_generate()
        from transformers import GenerationConfig

        stops = set(params.stop_token_ids)
        if not params.ignore_eos:
            eos = self.eos_token_id
            stops.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        config = GenerationConfig(
            max_new_tokens=params.max_new_tokens, min_new_tokens=params.max_new_tokens if params.ignore_eos else 0,
            do_sample=not params.greedy, num_return_sequences=1 if params.greedy else params.n,
            temperature=None if params.greedy else params.temperature, top_p=None if params.greedy else params.top_p,
            top_k=None if params.greedy else max(params.top_k, 0), eos_token_id=sorted(stops) or None,
            pad_token_id=0, output_logits=params.logprobs, return_dict_in_generate=True,
        )
        results = []
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            for i, prompt in enumerate(prompts):
                if params.seed is not None:
                    torch.manual_seed(params.seed + i)
                ids = torch.tensor([list(prompt)], device=self.device)
                out = self.model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
                tokens = out.sequences[:, ids.shape[1]:]
                rows = _sampled_logprobs(out.logits, tokens, params) if params.logprobs else [None] * len(tokens)
                responses = [_response(t.tolist(), row, stops) for t, row in zip(tokens, rows)]
                if self.record_routing:
                    responses = [replace(r, routed_experts=self.routed_experts([*prompt, *r.token_ids]))
                                 for r in responses]
                if params.greedy:  # HF samples one greedy sequence; SGLang returns n equal ones
                    responses = [replace(r, token_ids=list(r.token_ids),
                                         logprobs=None if r.logprobs is None else list(r.logprobs))
                                 for r in responses for _ in range(params.n)]
                results.append(responses)
                for k, response in enumerate(responses if on_response is not None else ()):
                    on_response(i, k, response)
        return results

    def routed_experts(self, sequence: Sequence[int]) -> torch.Tensor:
        """[len(sequence) − 1, MoE layers, top-k]: the experts HF's router picks for each token but the last (which
        generation never forwards): the top-k of its softmax over the router's logits, as Qwen3-MoE's block routes
        (`norm_topk_prob` rescales the weights, not the choice). One forward over the whole sequence: generation
        forwarded the prompt at once and each sampled token after it against the cache, the same hidden states but
        for float rounding, which could flip a near tie."""
        ids = torch.tensor([list(sequence[:-1])], device=self.device)
        out = self.model(ids, attention_mask=torch.ones_like(ids), output_router_logits=True)
        top_k = self.model.config.num_experts_per_tok
        per_layer = [torch.softmax(logits.float(), dim=-1).topk(top_k, dim=-1).indices for logits in out.router_logits]
        return torch.stack(per_layer, dim=1).to(torch.int32).cpu()

    def next_token_logprobs(self, prompts: Sequence[Sequence[int]], token_ids: Sequence[int]) -> list[list[float]]:
        if not self.is_owner:
            raise RuntimeError("next_token_logprobs runs on the engine's first rank")
        self.memory.check_can_generate()
        wanted = torch.tensor(list(token_ids), device=self.device)
        out = []
        with torch.no_grad():
            for prompt in prompts:  # one at a time, unpadded, as generate reads them
                ids = torch.tensor([list(prompt)], device=self.device)
                logits = self.model(ids, attention_mask=torch.ones_like(ids)).logits[0, -1].float()
                out.append(torch.log_softmax(logits, dim=-1)[wanted].tolist())
        return out


def _assemble(slices: list[torch.Tensor], dim) -> torch.Tensor:
    return slices[0] if dim is None else torch.cat(slices, dim=dim)


def _sampled_logprobs(logits: Sequence[torch.Tensor], tokens: torch.Tensor,
                      params: SamplingParams) -> list[list[float]]:
    """Each sampled token's log-prob under the sampling temperature, before top-k/top-p (SGLang's definition)."""
    scaled = torch.stack(list(logits), dim=1).float()
    if not params.greedy:
        scaled = scaled / params.temperature
    return torch.log_softmax(scaled, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1).tolist()


def _response(tokens: list[int], logprobs: list[float] | None, stops: set[int]) -> Response:
    for end, token in enumerate(tokens):
        if token in stops:
            return Response(tokens[: end + 1], None if logprobs is None else logprobs[: end + 1], "stop")
    return Response(tokens, logprobs, "length")
