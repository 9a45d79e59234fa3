"""`megarl export --checkpoint DIR --out HF_DIR`: a megarl model checkpoint → a HF checkpoint directory
(safetensors shards + index, config, tokenizer). Runs as one process, or under torchrun for large models. A LoRA
actor's checkpoint exports merged into its base model, and as a PEFT adapter directory (megarl/models/lora_export.py)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from megarl.config.schema import MegatronConfig
from megarl.models.hf_files import held_model_files, replace_hf_checkpoint
from megarl.process_exit import exit_process

def export_checkpoint(checkpoint: str | Path, out: str | Path, tp: int = 1, pp: int = 1,
                      adapter_out: str | Path | None = None, base_model: str | Path | None = None) -> None:
    from megarl.models.checkpoint import CheckpointError, checkpoint_lora, checkpoint_role, load_model_checkpoint
    from megarl.models.lora_export import export_lora_checkpoint
    from megarl.models.roles import build_frozen
    from parallel import cpu_compat, topology

    role_name = checkpoint_role(checkpoint)
    lora, _ = checkpoint_lora(checkpoint)
    if lora is not None and (tp, pp, int(os.environ.get("WORLD_SIZE", 1))) != (1, 1, 1):
        raise CheckpointError(f"{checkpoint} holds LoRA adapters: export it as one process at --tp 1 --pp 1 (the "
                              "adapters are small and the merge is per tensor)")
    cpu_compat.enable()  # where this machine has no GPU, megatron runs through the CPU shim
    topology.init_distributed()
    topology.init_model_parallel(tp=tp, pp=pp)
    if lora is not None:
        export_lora_checkpoint(checkpoint, out, adapter_out or Path(out) / "adapter", base_model)
        return
    megatron = MegatronConfig(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
    hf_dir = Path(checkpoint) / "hf"
    model = build_frozen(hf_dir, megatron, bf16=torch.cuda.is_available(), value_head=role_name == "critic")
    load_model_checkpoint(model, checkpoint)
    tensors = model.export_hf()
    if dist.get_rank() == 0:
        replace_hf_checkpoint(tensors, out, hf_dir)
    else:
        for _ in tensors:
            pass
    dist.barrier()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="megarl export", description=__doc__)
    parser.add_argument("--checkpoint", required=True,
                        help="a megarl model checkpoint directory, e.g. a training checkpoint's global_step_K/actor")
    parser.add_argument("--out", required=True, help="the HF checkpoint directory to write")
    parser.add_argument("--tp", type=int, default=1, help="tensor parallel size to load with (under torchrun)")
    parser.add_argument("--pp", type=int, default=1, help="pipeline parallel size to load with (under torchrun)")
    parser.add_argument("--force", action="store_true", help="replace the model files already in --out")
    parser.add_argument("--adapter-out", default=None,
                        help="a LoRA checkpoint's PEFT adapter directory (default: --out/adapter)")
    parser.add_argument("--base-model", default=None,
                        help="a LoRA checkpoint's base HF model (default: the one its role.json names)")
    args = parser.parse_args(argv)
    from megarl.models.checkpoint import CheckpointError

    held = held_model_files(args.out)
    if held and not args.force:
        print(f"error: --out {args.out} already holds a model ({', '.join(p.name for p in held)}): choose another "
              "directory, or pass --force to replace it", file=sys.stderr)
        return 2

    try:
        export_checkpoint(args.checkpoint, args.out, args.tp, args.pp, args.adapter_out, args.base_model)
    except (FileNotFoundError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if dist.get_rank() == 0:
        print(f"wrote {args.out}")
    from parallel import topology

    topology.destroy()
    return 0


if __name__ == "__main__":
    exit_process(main())
