"""A resident reference's pass through its worker on one GPU (run under torchrun by test_offload_gpu.py). Writes JSON
with what torch's allocator caches beyond live tensors before and after the pass, and the size of one of the pass's
logits tensors (the blocks the cache would keep without the worker's hand-back)."""

import json
import sys
from pathlib import Path

import torch

from megarl.config import load_config
from megarl.process_exit import exit_process
from megarl.rollout.base import Response
from megarl.rollout.batch import prompt_batch, with_responses
from megarl.workers.inputs import reference_inputs
from megarl.workers.reference import ReferenceWorker
from parallel import topology

LENGTH = 2048


def cached() -> int:
    torch.cuda.synchronize()
    return torch.cuda.memory_reserved() - torch.cuda.memory_allocated()


def main():
    model_dir, out = sys.argv[1:3]
    topology.init_distributed(timeout_s=300)
    cfg = load_config(overrides=[f"model.path={model_dir}", "ref.megatron.param_offload=false", "rollout.n=1",
                                 "data.train_batch_size=2", "actor.ppo_mini_batch_size=2", "data.max_prompt_length=16",
                                 f"data.max_response_length={LENGTH}"])
    worker = ReferenceWorker(reference_inputs(cfg))
    prompts = prompt_batch({"prompt_ids": [[5, 17, 33], [40, 41]]})
    batch = with_responses(prompts, [[Response([(p * 7 + j) % 120 + 1 for j in range(LENGTH)], [0.0] * LENGTH,
                                                "length")] for p in range(2)])
    torch.cuda.empty_cache()
    result = {"cached_before_pass_bytes": cached()}
    worker.compute_ref_log_prob(batch)
    result["cached_after_pass_bytes"] = cached()
    vocab = json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"]
    result["logits_bytes"] = LENGTH * vocab * 2  # one sequence's bf16 logits
    Path(out).write_text(json.dumps(result))
    topology.destroy()


if __name__ == "__main__":
    exit_process(main())
