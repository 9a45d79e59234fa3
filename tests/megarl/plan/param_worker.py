"""Parameters on each rank of tiny megatron models built by megarl from a config.json alone, in several layouts;
run under torchrun with 2 processes by test_shape.py.

usage: torchrun --nproc-per-node 2 param_worker.py OUT_JSON MODEL_DIR...
Rank 0 writes {model_dir: {"tp,pp,value_head": [parameters on rank 0, on rank 1]}}."""

import json
import sys

import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.utils import unwrap_model

from megarl.config.schema import MegatronConfig
from megarl.models.roles import build_frozen
from parallel import cpu_compat, topology

LAYOUTS = ((1, 1), (2, 1), (1, 2))  # (tp, pp) over 2 ranks


def rank_parameters(model_dir: str, tp: int, pp: int, value_head: bool) -> list[int]:
    role = build_frozen(model_dir, MegatronConfig(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp),
                        value_head=value_head)
    mine = sum(p.numel() for chunk in role.chunks for p in unwrap_model(chunk).parameters())
    counts = [None, None]
    dist.all_gather_object(counts, mine)
    return counts


def main(out: str, model_dirs: list[str]) -> None:
    cpu_compat.enable()  # a CPU test: megatron through the CPU shim
    topology.init_distributed()
    results: dict = {d: {} for d in model_dirs}
    for tp, pp in LAYOUTS:
        topology.init_model_parallel(tp, pp)
        for model_dir in model_dirs:
            for value_head in (False, True):
                results[model_dir][f"{tp},{pp},{value_head}"] = rank_parameters(model_dir, tp, pp, value_head)
        parallel_state.destroy_model_parallel()
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
