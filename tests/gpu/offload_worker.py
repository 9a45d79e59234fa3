"""Offloads on one GPU (run under torchrun by test_offload_gpu.py). Writes JSON with:
- the device bytes each actor holds after building and after one update (torch's allocator: one process), for
  no offload, `optimizer_offload`, and `param_offload` + `grad_offload`;
- whether the parameter-offloaded actor's weights equal the plain actor's after two updates (same GPU optimizer);
- Megatron-LM PR #5071: with optimizer offload, an update at lr 0 after the HF load, and after loading a weights-only
  checkpoint of other weights, leaves exactly the loaded weights (stale fp32 copies would write back others);
- the device bytes a reference holds after a pass, offloaded (`ref.megatron.param_offload`, the default) or not.
Every model is built on the layers its third argument names (`megatron.transformer_impl`)."""

import json
import sys

import torch

from megarl.config.schema import MegatronConfig, OptimConfig
from megarl.models.checkpoint import load_model_checkpoint, save_model_checkpoint
from megarl.models.packing import pack_sequences
from megarl.models.roles import build_actor, build_reference
from megarl.process_exit import exit_process
from parallel import topology

BATCHES = []


def loss(output, batch):
    return output.float().square().mean(), {}


def allocated() -> int:
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def weights(actor) -> dict:
    with actor.weights_in_use():
        return {name: tensor.clone() for name, tensor in actor.named_parameters()}


def footprint(model_dir, megatron: MegatronConfig, optim: OptimConfig, result: dict, name: str):
    before = allocated()
    actor = build_actor(model_dir, megatron, optim, total_steps=4, bf16=True)
    result[f"{name}_built_bytes"] = allocated() - before
    actor.train_step(BATCHES, loss)
    result[f"{name}_after_update_bytes"] = allocated() - before
    return actor


def main():
    model_dir, checkpoint_dir, transformer_impl, out = sys.argv[1:5]
    layers = dict(transformer_impl=transformer_impl)
    topology.init_distributed(timeout_s=300)
    topology.init_model_parallel()
    BATCHES.append(pack_sequences([torch.arange(2, 200), torch.arange(20, 150)], device=torch.device("cuda")))
    optim = OptimConfig(lr=1e-3, weight_decay=0.0)
    result = {}
    plain = footprint(model_dir, MegatronConfig(**layers), optim, result, "plain")
    result["params_per_rank"] = sum(t.numel() for _, t in plain.named_parameters())
    footprint(model_dir, MegatronConfig(optimizer_offload=True, **layers), optim, result, "optimizer_offload")
    offloaded = footprint(model_dir, MegatronConfig(param_offload=True, grad_offload=True, **layers), optim, result,
                          "param_grad_offload")
    plain.train_step(BATCHES, loss)
    offloaded.train_step(BATCHES, loss)
    plain_w, offloaded_w = weights(plain), weights(offloaded)
    result["param_offload_weights_equal_plain"] = all(torch.equal(plain_w[k], offloaded_w[k]) for k in plain_w)

    frozen = OptimConfig(lr=0.0, weight_decay=0.0)
    from_hf = build_actor(model_dir, MegatronConfig(optimizer_offload=True, **layers), frozen, total_steps=4, bf16=True)
    loaded = weights(from_hf)
    from_hf.train_step(BATCHES, loss)
    result["hf_load_kept"] = all(torch.equal(loaded[k], v) for k, v in weights(from_hf).items())

    save_model_checkpoint(plain, checkpoint_dir)  # weights two updates away from the HF ones
    reloaded = build_actor(model_dir, MegatronConfig(optimizer_offload=True, **layers), frozen, total_steps=4, bf16=True)
    load_model_checkpoint(reloaded, checkpoint_dir)
    reloaded.train_step(BATCHES, loss)
    result["checkpoint_load_kept"] = all(torch.equal(plain_w[k], v) for k, v in weights(reloaded).items())
    result["checkpoint_differs_from_hf"] = any(not torch.equal(plain_w[k], v) for k, v in loaded.items())
    references = []
    for name, offload in (("offloaded", True), ("resident", False)):
        before = allocated()
        references.append(build_reference(model_dir, MegatronConfig(**layers), bf16=True, param_offload=offload))
        with references[-1].weights_in_use():
            pass
        result[f"reference_{name}_bytes"] = allocated() - before
    with open(out, "w") as f:
        json.dump(result, f)
    topology.destroy()


if __name__ == "__main__":
    exit_process(main())
