"""Router replay (R3) on a tiny Qwen3-MoE, run under torchrun by test_router_replay.py (one CPU process, fp32).

usage: torchrun --nproc-per-node N router_replay_worker.py MODEL_DIR ENGINE_DIR OUT_JSON [PP CP]
The engine (megarl's transformers engine) serves ENGINE_DIR, the model with its routers' weights perturbed, so it
routes many tokens elsewhere than the actor's routers would. The actor's routing is read from megatron's router
itself (a forward hook on each TopKRouter: the routing map it hands the token dispatcher), in the log-prob pass with
and without the engine's routing, and in an update with full activation recompute (the router runs again in the
backward). Samples of several lengths share micro-batches, so the packed order of the routing is checked.
Writes, per pass and rank, how many (token, layer) pairs route as the engine did and how many differ (each pipeline
stage its own layers; not counted over context-parallel ranks, whose routers see chunks of each sample).
"""

import json
import sys

import torch
import torch.distributed as dist
from megatron.core.transformer.moe.router import TopKRouter
from megatron.core.transformer.moe.router_replay import RouterReplayAction

from megarl.config.schema import MegatronConfig, OptimConfig
from megarl.models.logprobs import vocab_parallel_logprobs_and_entropy
from megarl.models.packing import pack_micro_batches
from megarl.models.roles import build_actor
from megarl.process_exit import exit_process
from megarl.rollout.transformers_engine import TransformersEngine
from parallel import cpu_compat, topology

LENGTHS = (9, 14, 6, 11, 8)
MICRO_BATCHES = [[0, 1, 2], [3, 4]]


class RoutingCapture:
    """Each call of each router: its layer, the experts it routed each token to (sorted ids), and whether it was
    activation recompute's call in a backward (megatron's replay action then is REPLAY_BACKWARD)."""

    def __init__(self, chunks):
        self.calls: list[tuple[int, torch.Tensor, bool]] = []
        routers = [m for chunk in chunks for m in chunk.modules() if isinstance(m, TopKRouter)]
        self.hooks = [router.register_forward_hook(self._record) for router in routers]

    def _record(self, router, args, output):
        _, routing_map = output
        experts = torch.stack([row.nonzero().flatten() for row in routing_map.detach()])
        recomputed = router.router_replay.router_replay_action == RouterReplayAction.REPLAY_BACKWARD
        self.calls.append((router.layer_number - 1, experts, recomputed))

    def compare(self, routing: list[torch.Tensor], groups: list[list[int]], lengths: list[int]) -> dict:
        """Each captured call against the engine's routing of its micro-batch: pairs of real (forwarded) tokens equal
        and different. The forward calls come micro-batch by micro-batch, each layer of the stage once, and so do the
        recompute's (a pipeline schedule runs forwards of later micro-batches before a backward)."""
        same = differ = 0
        for recomputed in (False, True):
            calls = [(layer, experts) for layer, experts, again in self.calls if again == recomputed]
            for index, (layer, experts) in enumerate(calls):
                group, start = groups[index // (len(calls) // len(groups))], 0
                for sample in group:
                    forwarded = lengths[sample] - 1
                    engine = routing[sample][:, layer].sort(-1).values.long()
                    equal = (experts[start : start + forwarded] == engine).all(-1)
                    same, differ = same + int(equal.sum()), differ + int((~equal).sum())
                    start += lengths[sample]
        return {"same": same, "differ": differ, "calls": len(self.calls)}

    def close(self):
        for hook in self.hooks:
            hook.remove()


def negative_log_likelihood(logits, batch):
    """Of the real tokens, whatever the layout: a context-parallel rank's share of the sum is its chunks' (megatron
    sums the gradients over those ranks)."""
    logprobs, _ = vocab_parallel_logprobs_and_entropy(logits, batch.labels, 1.0, False)
    return -(logprobs * batch.token_fields["real"]).sum() / sum(LENGTHS), {}


def captured(actor, run, routing, lengths, count: bool) -> dict:
    if not count:
        return run()
    capture = RoutingCapture(actor.chunks)
    try:
        result = run()
    finally:
        capture.close()
    return {**capture.compare(routing, MICRO_BATCHES, lengths), **result}


def main(model_dir: str, engine_dir: str, out: str, pp: str = "1", cp: str = "1") -> None:
    cpu_compat.enable()
    topology.init_distributed(timeout_s=300)
    layout = MegatronConfig(recompute_granularity="full", pipeline_model_parallel_size=int(pp),
                            context_parallel_size=int(cp))
    topology.init_model_parallel(pp=layout.pipeline_model_parallel_size, cp=layout.context_parallel_size, seed=7)
    engine = TransformersEngine(engine_dir, engine_ranks=[dist.get_rank()], record_routing=True)  # one per rank
    generator = torch.Generator().manual_seed(1234)
    seqs = [torch.randint(0, 128, (n,), generator=generator) for n in LENGTHS]
    routing = [engine.routed_experts(s.tolist()) for s in seqs]
    lengths = list(LENGTHS)
    optim = OptimConfig(lr=1e-3, weight_decay=0.0)
    actor = build_actor(model_dir, layout, optim, total_steps=1, router_replay=True)

    def logprobs(replayed):
        def run():
            out = actor.logprobs(seqs, MICRO_BATCHES, routing=routing if replayed else None)
            flips = [f.sum().item() for f in out.get("routing_flips", [])]
            return {"logprobs": [t.tolist() for t in out["logprobs"]], "flips": flips}
        return run

    def update():
        real = {"real": [torch.ones(n - 1) for n in LENGTHS]}  # the forwarded tokens, not padding
        batches = pack_micro_batches(seqs, MICRO_BATCHES, token_fields=real, routing=routing,
                                     one_length=actor.packs_to_one_length)
        step = actor.train_step(batches, negative_log_likelihood)
        return {"grad_norm": step["grad_norm"]}

    count = layout.context_parallel_size == 1
    result = {"replayed": captured(actor, logprobs(True), routing, lengths, count),
              "own": captured(actor, logprobs(False), routing, lengths, count),
              "update": captured(actor, update, routing, lengths, count)}
    ranks = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, result)
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump({"ranks": ranks, "routing_shape": list(routing[0].shape)}, f)
    topology.destroy()


if __name__ == "__main__":
    exit_process(main(*sys.argv[1:]))
