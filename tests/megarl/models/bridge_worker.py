"""What megarl's bridge builds and exports in one pipeline layout, under torchrun (run by test_bridge.py).

usage: torchrun --nproc-per-node N bridge_worker.py MODEL_DIR OUT_JSON --pp P [--te-installed]
Rank 0 writes every stage's layers (global number, core attention), final norms, the HF names an actor and
a critic export, in order (repeats included), and what mbridge's own Qwen3 class maps output_layer to. With
--te-installed every megarl module that asks whether Transformer Engine is importable is told it is (as in the Docker
image), so the models show which layers the default `megatron.transformer_impl` builds there.
"""

import argparse
import json
import sys

import torch
import torch.distributed as dist
from mbridge.models.qwen3 import Qwen3Bridge
from mbridge.utils.post_creation_callbacks import make_value_model
from megatron.core.utils import unwrap_model

from megarl.models.bridge import export_hf_weights, make_bridge
from megarl.process_exit import exit_process
from parallel import cpu_compat, topology


def build(model_dir: str, value_head: bool):
    bridge = make_bridge(model_dir, torch.float32, value_head=value_head)
    chunks = bridge.get_model(weight_path=model_dir, bf16=False, use_cpu_initialization=True,
                              post_model_creation_callbacks=[make_value_model] if value_head else [])
    return bridge, chunks


def stage_layout(chunks) -> dict:
    decoders = [unwrap_model(chunk).decoder for chunk in chunks]
    return {
        "layers": [[layer.layer_number, type(layer.self_attention.core_attention).__name__]
                   for decoder in decoders for layer in decoder.layers],
        "final_norms": [type(d.final_layernorm).__name__ for d in decoders if d.final_layernorm is not None],
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("out")
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--te-installed", action="store_true")
    args = parser.parse_args()
    cpu_compat.enable()  # a CPU test: megatron through the CPU shim
    if args.te_installed:
        for name, module in list(sys.modules.items()):
            if name.startswith("megarl.") and hasattr(module, "transformer_engine_available"):
                module.transformer_engine_available = lambda: True
    topology.init_distributed(timeout_s=300)
    topology.init_model_parallel(pp=args.pp, seed=0)
    bridge, actor = build(args.model_dir, value_head=False)
    actor_names = [name for name, _ in export_hf_weights(bridge, actor)]
    critic_bridge, critic = build(args.model_dir, value_head=True)
    critic_names = [name for name, _ in export_hf_weights(critic_bridge, critic)]
    stages = [None] * dist.get_world_size()
    dist.all_gather_object(stages, stage_layout(actor))
    if dist.get_rank() == 0:
        result = {"stages": stages, "actor_names": actor_names, "critic_names": critic_names,
                  "mbridge_output_layer": Qwen3Bridge._DIRECT_MAPPING["output_layer.weight"]}
        with open(args.out, "w") as f:
            json.dump(result, f)
    topology.destroy()


if __name__ == "__main__":
    exit_process(main())
