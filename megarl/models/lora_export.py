"""A LoRA actor's checkpoint → a HF checkpoint with the adapters merged, and a PEFT adapter directory.

The checkpoint holds the adapters only; its base is the HF checkpoint named in role.json (`base_model`). Both are
loaded at one rank (adapters are small, and the merge W + alpha/r · B A is per tensor), and every tensor goes through
the conversion the rollout engine's weights take (`megarl.models.to_hf.hf_converter`), so the merged export is
what the engine served. The PEFT directory (`adapter_config.json`, `adapter_model.safetensors`) names HF's
projections: megatron's fused qkv and gate/up adapters share one A, so q, k and v (gate and up) each get that A
and their rows of B, which is the same update.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from megarl.config.schema import LoRAConfig, MegatronConfig
from megarl.models.bridge import load_hf_config
from megarl.models.checkpoint import CheckpointError, checkpoint_lora, load_model_checkpoint
from megarl.models.hf_files import replace_hf_checkpoint
from megarl.models.roles import build_frozen
from megarl.models.to_hf import hf_converter

PEFT_PREFIX = "base_model.model."


def export_lora_checkpoint(checkpoint: str | Path, out: str | Path, adapter_out: str | Path,
                           base_model: str | Path | None = None) -> None:
    """Write the merged model to `out` and the PEFT adapter to `adapter_out` (one process, tensor and pipeline
    parallel size 1). `base_model` overrides the base directory the checkpoint recorded."""
    settings, recorded = checkpoint_lora(checkpoint)
    base = Path(base_model or recorded)
    if not (base / "config.json").is_file():
        raise CheckpointError(f"{checkpoint} holds LoRA adapters of the base model {base}, which is not a HF checkpoint "
                              "directory here: pass --base-model DIR (the model the run was trained from)")
    model = build_frozen(base, MegatronConfig(), bf16=torch.cuda.is_available(), lora=LoRAConfig(**settings))
    load_model_checkpoint(model, checkpoint)
    convert = hf_converter(load_hf_config(base))
    merged = ((hf_name, tensor) for name, weight in model.named_parameters()
              for hf_name, tensor, _ in convert(name, weight))
    replace_hf_checkpoint(merged, out, Path(checkpoint) / "hf")
    write_peft_adapter(model, adapter_out, settings, base, convert)


def write_peft_adapter(model, out: str | Path, settings: dict, base: Path, convert) -> None:
    """`convert`: megarl.models.to_hf.hf_converter's function, which splits B's rows as the weight's."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tensors, modules = {}, set()
    for name, layer in model.named_adapters():
        lora_a = layer.lora_A.detach().to("cpu").contiguous()
        for hf_name, lora_b, _ in convert(f"{name}.weight", layer.lora_B.detach().to("cpu")):
            module = hf_name.removesuffix(".weight")
            tensors[f"{PEFT_PREFIX}{module}.lora_A.weight"] = lora_a.clone()  # safetensors stores no shared tensors
            tensors[f"{PEFT_PREFIX}{module}.lora_B.weight"] = lora_b.contiguous()
            modules.add(module.rsplit(".", 1)[-1])
    save_file(tensors, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": str(base),
              "r": settings["rank"], "lora_alpha": settings["alpha"], "lora_dropout": settings["dropout"],
              "target_modules": sorted(modules), "bias": "none", "fan_in_fan_out": False, "use_rslora": False,
              "inference_mode": True}
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2))
