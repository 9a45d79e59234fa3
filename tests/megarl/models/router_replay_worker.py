"""Router replay (R3) on a tiny Qwen3-MoE, run under torchrun by test_router_replay.py (one CPU process, fp32).

usage: torchrun --nproc-per-node 1 router_replay_worker.py MODEL_DIR ENGINE_DIR OUT_JSON
The engine (megarl's transformers engine) serves ENGINE_DIR, the model with its routers' weights perturbed, so it
routes many tokens elsewhere than the actor's routers would. The actor's routing is read from megatron's router
itself (a forward hook on each TopKRouter: the routing map it hands the token dispatcher), in the log-prob pass with
and without the engine's routing, and in an update with full activation recompute (the router runs again in the
backward). Samples of several lengths share micro-batches, so the packed order of the routing is checked.
Writes, per pass, how many (token, layer) pairs route as the engine did and how many differ.
"""

import json
import sys

import torch
from megatron.core.transformer.moe.router import TopKRouter

from megarl.config.schema import MegatronConfig, OptimConfig
from megarl.models.packing import pack_micro_batches
from megarl.models.roles import build_actor
from megarl.process_exit import exit_process
from megarl.rollout.transformers_engine import TransformersEngine
from parallel import cpu_compat, topology

LENGTHS = (9, 14, 6, 11, 8)
MICRO_BATCHES = [[0, 1, 2], [3, 4]]


class RoutingCapture:
    """Each call of each router: its layer and the experts it routed each token to (sorted ids)."""

    def __init__(self, chunks):
        self.calls: list[tuple[int, torch.Tensor]] = []
        routers = [m for chunk in chunks for m in chunk.modules() if isinstance(m, TopKRouter)]
        self.hooks = [router.register_forward_hook(self._record) for router in routers]

    def _record(self, router, args, output):
        _, routing_map = output
        experts = torch.stack([row.nonzero().flatten() for row in routing_map.detach()])
        self.calls.append((router.layer_number - 1, experts))

    def compare(self, routing: list[torch.Tensor], groups: list[list[int]], lengths: list[int]) -> dict:
        """Each captured call against the engine's routing of its micro-batch (calls come micro-batch by micro-batch,
        each layer once, or twice with recompute): pairs of real (forwarded) tokens equal and different."""
        per_micro_batch = len(self.calls) // len(groups)
        same = differ = 0
        for index, (layer, experts) in enumerate(self.calls):
            group, start = groups[index // per_micro_batch], 0
            for sample in group:
                forwarded = lengths[sample] - 1
                mine = experts[start : start + forwarded]
                engine = routing[sample][:, layer].sort(-1).values.long()
                equal = (mine == engine).all(-1)
                same, differ = same + int(equal.sum()), differ + int((~equal).sum())
                start += lengths[sample]
        return {"same": same, "differ": differ, "calls": len(self.calls)}

    def close(self):
        for hook in self.hooks:
            hook.remove()


def captured(actor, run, routing, lengths) -> dict:
    capture = RoutingCapture(actor.chunks)
    try:
        result = run()
    finally:
        capture.close()
    return {**capture.compare(routing, MICRO_BATCHES, lengths), **result}


def main(model_dir: str, engine_dir: str, out: str) -> None:
    cpu_compat.enable()
    topology.init_distributed(timeout_s=300)
    topology.init_model_parallel(seed=7)
    engine = TransformersEngine(engine_dir, record_routing=True)
    generator = torch.Generator().manual_seed(1234)
    seqs = [torch.randint(0, 128, (n,), generator=generator) for n in LENGTHS]
    routing = [engine.routed_experts(s.tolist()) for s in seqs]
    lengths = list(LENGTHS)
    optim = OptimConfig(lr=1e-3, weight_decay=0.0)
    actor = build_actor(model_dir, MegatronConfig(recompute_granularity="full"), optim, total_steps=1,
                        router_replay=True)

    def logprobs(replayed):
        def run():
            out = actor.logprobs(seqs, MICRO_BATCHES, routing=routing if replayed else None)
            flips = [f.sum().item() for f in out.get("routing_flips", [])]
            return {"logprobs": [t.tolist() for t in out["logprobs"]], "flips": flips}
        return run

    def update():
        batches = pack_micro_batches(seqs, MICRO_BATCHES, routing=routing)
        step = actor.train_step(batches, lambda logits, batch: (logits.float().mean(), {}))
        return {"grad_norm": step["grad_norm"]}

    result = {"replayed": captured(actor, logprobs(True), routing, lengths),
              "own": captured(actor, logprobs(False), routing, lengths),
              "update": captured(actor, update, routing, lengths),
              "routing_shape": list(routing[0].shape)}
    with open(out, "w") as f:
        json.dump(result, f)
    topology.destroy()


if __name__ == "__main__":
    exit_process(main(*sys.argv[1:4]))
