"""Checkpoint worker for test_checkpoint.py (under torchrun).

save MODEL_DIR OUT TP: train actor and critic one step at TP, save both checkpoints, write the live weights
  as HF tensors (expected_*.safetensors) and the critic's values (values.json).
values HF_DIR OUT: a critic built from an exported HF critic directory; writes its values (values.json).
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import save_file

from megarl.config.schema import MegatronConfig, OptimConfig
from megarl.models.checkpoint import save_model_checkpoint
from megarl.models.packing import pack_sequences
from megarl.models.roles import build_actor, build_critic
from parallel import topology

SEQS = [torch.arange(3, 12), torch.arange(20, 27), torch.arange(40, 53)]


def one_step(role):
    batches = [pack_sequences(SEQS)]
    role.train_step(batches, lambda output, batch: (output.float().mean(), {}))


def main():
    mode, source, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    tp = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    topology.init_distributed(timeout_s=120)
    topology.init_model_parallel(tp=tp)
    megatron = MegatronConfig(tensor_model_parallel_size=tp)
    optim = OptimConfig(lr=1e-2, weight_decay=0.0)
    if mode == "save":
        for role in (build_actor(source, megatron, optim, 1), build_critic(source, megatron, optim, 1, seed=5)):
            one_step(role)
            save_model_checkpoint(role, out / role.role)
            tensors = {name: tensor.clone() for name, tensor in role.export_hf()}
            if dist.get_rank() == 0:
                save_file(tensors, str(out / f"expected_{role.role}.safetensors"))
            if role.role == "critic":
                values = [v.tolist() for v in role.values(SEQS, [[0, 1, 2]])]
    else:
        values = [v.tolist() for v in build_critic(source, megatron, optim, 1, seed=99).values(SEQS, [[0, 1, 2]])]
    if dist.get_rank() == 0:
        (out / "values.json").write_text(json.dumps(values))
    dist.barrier()
    topology.destroy()


if __name__ == "__main__":
    main()
