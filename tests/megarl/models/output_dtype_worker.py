"""Run by test_forward.py in a process of its own (megatron's parallel state): a bf16 model, which megatron wraps in
its Float16Module, hands the per-token function its logits in bf16, not upcast to float32, with the same log-probs
as the upcast logits give. Prints one JSON object."""

import json
import tempfile
from pathlib import Path

import torch

from megarl.config.schema import MegatronConfig
from megarl.models.forward import run_forward
from megarl.models.logprobs import vocab_parallel_logprobs_and_entropy
from megarl.models.packing import pack_micro_batches
from megarl.models.roles import build_reference
from parallel import cpu_compat, topology
from tests.helpers import make_model

cpu_compat.enable()  # a CPU test: megatron through the CPU shim
topology.init_distributed()
topology.init_model_parallel()
with tempfile.TemporaryDirectory() as tmp:
    reference = build_reference(make_model("qwen3", Path(tmp) / "model"), MegatronConfig(), bf16=True)
torch.manual_seed(0)
sequences = [torch.randint(0, 128, (n,)) for n in (9, 5, 12)]
dtypes = []


def per_token(logits, batch):
    dtypes.append(str(logits.dtype))
    logprobs, _ = vocab_parallel_logprobs_and_entropy(logits, batch.labels, with_entropy=False)
    upcast, _ = vocab_parallel_logprobs_and_entropy(logits.float(), batch.labels, with_entropy=False)
    return {"difference": (logprobs - upcast).abs()}


results = run_forward(reference.chunks, pack_micro_batches(sequences, [[0, 1], [2]]), per_token, reference.blocks)
difference = max(d.max().item() for result in results for d in result["difference"])
print(json.dumps({"dtypes": dtypes, "difference": difference}))
topology.destroy()
