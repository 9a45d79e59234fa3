"""Checkpoint worker for test_checkpoint.py (under torchrun).

save MODEL_DIR OUT TP: train actor and critic one step at TP, save a training checkpoint of the actor and a model
  checkpoint of the critic, write the live weights as HF tensors (expected_*.safetensors) and the critic's values
  (values.json).
values HF_DIR OUT: a critic built from an exported HF critic directory; writes its values (values.json).
continue MODEL_DIR OUT TP: train the actor two steps, save a training checkpoint (OUT/actor), train a third;
  writes the third step's metrics and the weights after it (continue.pt).
resume MODEL_DIR OUT TP: a fresh actor loads OUT/actor and trains one step; writes the same (resume.pt).
load MODEL_DIR OUT TP: a fresh actor loads OUT/actor (for the error cases).
Several jobs (`MODE SOURCE OUT [TP] --and MODE SOURCE OUT [TP] ...`) run one after another in one launch, each on a
megatron mesh of its own.
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.utils import unwrap_model
from safetensors.torch import save_file

from megarl.config.schema import MegatronConfig, OptimConfig
from megarl.models.checkpoint import load_training_checkpoint, save_model_checkpoint, save_training_checkpoint
from megarl.models.packing import pack_sequences
from megarl.models.roles import build_actor, build_critic
from megarl.process_exit import exit_process
from parallel import cpu_compat, topology
from tests.helpers import split_jobs

SEQS = [torch.arange(3, 12), torch.arange(20, 27), torch.arange(40, 53)]


def one_step(role):
    batches = [pack_sequences(SEQS)]
    return role.train_step(batches, lambda output, batch: (output.float().mean(), {}))


def weights_after_step(role) -> dict:
    metrics = one_step(role)
    # An RNG draw shows whether the random number generators continue where the checkpoint left them.
    weights = {name: p.detach().clone() for name, p in unwrap_model(role.chunks[0]).named_parameters()}
    return {"metrics": metrics, "weights": weights, "draw": torch.rand(3)}


def main():
    cpu_compat.enable()  # a CPU test: megatron through the CPU shim
    topology.init_distributed(timeout_s=120)
    for job in split_jobs(sys.argv[1:]):
        run_job(job[0], job[1], Path(job[2]), int(job[3]) if len(job) > 3 else 1)
        parallel_state.destroy_model_parallel()
    topology.destroy()


def run_job(mode: str, source: str, out: Path, tp: int) -> None:
    topology.init_model_parallel(tp=tp)
    megatron = MegatronConfig(tensor_model_parallel_size=tp)
    optim = OptimConfig(lr=1e-2, weight_decay=0.0)
    result = None
    if mode == "save":
        for role, save in ((build_actor(source, megatron, optim, 1), save_training_checkpoint),
                           (build_critic(source, megatron, optim, 1, seed=5), save_model_checkpoint)):
            one_step(role)
            save(role, out / role.name)
            tensors = {name: tensor.clone() for name, tensor in role.export_hf()}
            if dist.get_rank() == 0:
                save_file(tensors, str(out / f"expected_{role.name}.safetensors"))
            if role.name == "critic":
                result = [v.tolist() for v in role.values(SEQS, [[0, 1, 2]])]
    elif mode == "values":
        result = [v.tolist() for v in build_critic(source, megatron, optim, 1, seed=99).values(SEQS, [[0, 1, 2]])]
    else:  # a warmup and weight decay, so that the scheduler's position and every optimizer state matter
        actor = build_actor(source, megatron, OptimConfig(lr=1e-2, weight_decay=0.1, lr_warmup_steps=4), 10)
        if mode == "continue":
            one_step(actor)
            one_step(actor)
            save_training_checkpoint(actor, out / "actor")
        else:
            load_training_checkpoint(actor, out / "actor")
        if mode != "load":
            torch.save(weights_after_step(actor), out / f"{mode}_{dist.get_rank()}.pt")
    if dist.get_rank() == 0 and result is not None:
        (out / "values.json").write_text(json.dumps(result))
    dist.barrier()


if __name__ == "__main__":
    exit_process(main())
