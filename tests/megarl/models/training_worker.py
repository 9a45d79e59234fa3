"""RoleModel.train_step (run under torchrun by test_training.py): writes the lr used by each of five steps, with
warmup 2 and cosine decay over 5 steps; then, for one step over three micro-batches, the metrics each micro-batch's
loss function gave (as floats) and the step's sums of them, as train_step returns them and after reduce_metrics."""

import json
import sys

import torch

from megarl.config.schema import MegatronConfig, OptimConfig
from megarl.models.packing import pack_sequences
from megarl.models.roles import build_actor
from megarl.process_exit import exit_process
from megarl.workers.updates import reduce_metrics
from parallel import cpu_compat, topology


def grad_buffers(model_dir: str, optim: OptimConfig) -> dict:
    """bf16 actors with float32 gradient buffers (the default) and bf16 ones: each buffer's dtype, its bytes, and
    the grad norm of one step."""
    found = {}
    for fp32 in (True, False):
        actor = build_actor(model_dir, MegatronConfig(grad_reduce_in_fp32=fp32), optim, total_steps=1, bf16=True)
        buffers = [buffer.grad_data for chunk in actor.chunks for buffer in chunk.buffers]
        batches = [pack_sequences([torch.arange(2, 10), torch.arange(20, 26)])]
        norm = actor.train_step(batches, lambda output, batch: (output.float().square().mean(), {}))["grad_norm"]
        found["fp32" if fp32 else "bf16"] = {"dtypes": sorted({str(b.dtype) for b in buffers}),
                                             "bytes": sum(b.numel() * b.element_size() for b in buffers),
                                             "grad_norm": float(norm)}
    return found


def main():
    model_dir, out = sys.argv[1], sys.argv[2]
    cpu_compat.enable()  # a CPU test: megatron through the CPU shim
    topology.init_distributed(timeout_s=120)
    topology.init_model_parallel()
    optim = OptimConfig(lr=1e-3, min_lr=1e-4, lr_warmup_steps=2, lr_decay_style="cosine", weight_decay=0.0)
    actor = build_actor(model_dir, MegatronConfig(), optim, total_steps=5)
    batches = [pack_sequences([torch.arange(2, 10), torch.arange(20, 26)])]
    lrs = [actor.optimizer.param_groups[0]["lr"]]
    for _ in range(5):
        lrs.append(actor.train_step(batches, lambda output, batch: (output.float().mean(), {}))["lr"])

    given = []

    def loss_fn(output, batch):
        metrics = {"mean": output.float().mean(), "last": output[0, -1].float().std()}
        given.append({key: value.item() for key, value in metrics.items()})
        return output.float().mean(), metrics

    batches = [pack_sequences([torch.arange(n, 3 * n)]) for n in (3, 5, 7)]
    step = actor.train_step(batches, loss_fn)
    with open(out, "w") as f:
        json.dump({"lrs": lrs, "given": given, "summed": {key: float(step[key]) for key in given[0]},
                   "reduced": reduce_metrics(step), "grad_buffers": grad_buffers(model_dir, optim)}, f)
    topology.destroy()


if __name__ == "__main__":
    exit_process(main())
