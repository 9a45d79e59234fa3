"""Gradient offload on CPU (run under torchrun by test_offload.py): two actors from one checkpoint (dense, or a
mixture of experts with its experts split over every rank: megatron keeps their gradients in buffers of their own),
one with
`grad_offload`, train three steps side by side. Writes, per step, both losses and grad norms, whether the offloaded
actor's gradient buffers hold storage between steps, and whether the weights stay identical. Then an update of two
steps (`updating()`): the offloaded actor's buffers between its steps and after it."""

import json
import sys

import torch

from megarl.config.schema import MegatronConfig, OptimConfig
from megarl.models.packing import pack_sequences
from megarl.models.roles import build_actor
from megarl.process_exit import exit_process
from parallel import cpu_compat, topology


def grad_storage_bytes(actor, experts_only: bool = False) -> int:
    """The storage of the actor's gradient buffers (megatron keeps a mixture-of-experts model's experts' apart)."""
    return sum(buffer.grad_data.untyped_storage().nbytes() for chunk in actor.chunks
               for buffer in ([] if experts_only else chunk.buffers) + chunk.expert_parallel_buffers)


def main():
    model_dir, out = sys.argv[1], sys.argv[2]
    cpu_compat.enable()  # a CPU test: megatron through the CPU shim
    topology.init_distributed(timeout_s=120)
    ep = torch.distributed.get_world_size()
    topology.init_model_parallel(ep=ep)
    optim = OptimConfig(lr=1e-3, weight_decay=0.0)
    kept = build_actor(model_dir, MegatronConfig(expert_model_parallel_size=ep), optim, total_steps=3)
    freed = build_actor(model_dir, MegatronConfig(grad_offload=True, expert_model_parallel_size=ep), optim,
                        total_steps=3)
    result = {"kept_bytes_at_build": grad_storage_bytes(kept), "freed_bytes_at_build": grad_storage_bytes(freed),
              "kept_expert_bytes_at_build": grad_storage_bytes(kept, experts_only=True), "steps": []}
    batches = [pack_sequences([torch.arange(2, 10), torch.arange(20, 26)])]
    for _ in range(3):
        step = {}
        for name, actor in (("kept", kept), ("freed", freed)):
            metrics = actor.train_step(batches, lambda output, batch: (output.float().square().mean(), {}))
            step[f"{name}_grad_norm"] = metrics["grad_norm"]
        step["freed_bytes_between_steps"] = grad_storage_bytes(freed)
        step["weights_equal"] = all(torch.equal(a, b) for (_, a), (_, b)
                                    in zip(kept.named_parameters(), freed.named_parameters()))
        result["steps"].append(step)
    loss = lambda output, batch: (output.float().square().mean(), {})  # noqa: E731
    with freed.updating(), kept.updating():
        norms = [(freed.train_step(batches, loss)["grad_norm"], kept.train_step(batches, loss)["grad_norm"])]
        result["freed_bytes_within_an_update"] = grad_storage_bytes(freed)
        norms.append((freed.train_step(batches, loss)["grad_norm"], kept.train_step(batches, loss)["grad_norm"]))
    result["freed_bytes_after_an_update"] = grad_storage_bytes(freed)
    result["update_grad_norms"] = norms
    if torch.distributed.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    topology.destroy()


if __name__ == "__main__":
    exit_process(main())
