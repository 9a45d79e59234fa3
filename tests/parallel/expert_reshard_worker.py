"""Run under torchrun by test_expert_reshard.py: a tiny Qwen3-MoE (loaded, not trained) with its experts over
`--ep` ranks streams its weights into engines of `--rollout-tp` ranks that hold their experts whole
(`EngineExperts`, SGLang's expert parallelism). Rank 0 writes, for every rank: the experts that reached its sink
whole and equal to the checkpoint's, those that came as placeholders, and the bytes the sync received."""

import argparse
import json

import torch
import torch.distributed as dist
from safetensors.torch import load_file

from megarl.config.schema import MegatronConfig, OptimConfig
from megarl.models.bridge import load_hf_config
from megarl.models.hf_names import hf_expert
from megarl.models.roles import build_actor
from megarl.models.to_hf import hf_converter
from megarl.process_exit import exit_process
from parallel import cpu_compat, topology
from parallel.engines import EngineExperts, engine_slots


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("out")
    parser.add_argument("--ep", type=int, required=True)
    parser.add_argument("--rollout-tp", type=int, required=True)
    args = parser.parse_args()
    cpu_compat.enable()
    topology.init_distributed()
    topology.init_model_parallel(ep=args.ep)
    actor = build_actor(args.model_dir, MegatronConfig(expert_model_parallel_size=args.ep), OptimConfig(), 1)
    hf_config = load_hf_config(args.model_dir)
    per_rank = hf_config.num_experts // args.rollout_tp
    slots = engine_slots(dist.get_world_size(), 1, args.rollout_tp)
    streamer = actor.weight_streamer(hf_converter(hf_config), slots[dist.get_rank()], slots, EngineExperts(per_rank))
    checkpoint = load_file(f"{args.model_dir}/model.safetensors")
    whole, placeholders = set(), set()

    def sink(bucket):
        for name, tensor, _ in bucket:
            if (expert := hf_expert(name)) is None:
                continue
            if tensor.numel() == 1:
                placeholders.add(expert[1])
            elif torch.equal(tensor, checkpoint[name]):
                whole.add(expert[1])

    stats = streamer.sync(sink)
    mine = {"engine_rank": slots[dist.get_rank()].engine_rank, "whole": sorted(whole),
            "placeholders": sorted(placeholders), "bytes_received": stats.bytes_received}
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    if dist.get_rank() == 0:
        with open(args.out, "w") as f:
            json.dump(every, f)
    exit_process(0)


if __name__ == "__main__":
    main()
