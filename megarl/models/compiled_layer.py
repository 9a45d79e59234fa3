"""megatron-core's TransformerLayer compiled whole with torch.compile on a GPU (the local spec's layer, swapped in
through megarl/models/spec.py).

Without Transformer Engine, each layer's forward at 0.5B is a Python call chain through megatron's modules and
a few dozen small kernels. Its backward is as many autograd nodes, several with Python backward functions. At
this size the GPU sat waiting on the host for much of each training pass. Compiled whole, a layer is one guarded
call into fused kernels forward and one backward: every role call of a step runs faster (docs/benchmarks.md).

Compiled at tensor, pipeline and context parallel size 1 on a GPU, where it was measured and checked. There, packed
attention is one varlen kernel call. Context parallelism's per-sequence loop would specialise the code on every
micro-batch's lengths. At tensor parallel 2 (tried on CPU over gloo, 2026-11-27) dynamo splits every layer at each
tensor-parallel linear: the autograd function of megatron's linear all-reduces its input gradient with
`async_op=True`, which dynamo does not trace, and sets a warn-once attribute on a function; new micro-batch shapes
then compiled new graphs. Pipeline parallelism awaits a check on two GPUs. A mixture-of-experts layer stays eager:
its token dispatch moves per-expert token counts to the host (`record_stream`, which inductor cannot functionalize)
and its tensors' shapes follow the routing. Elsewhere the layer runs eagerly,
as megatron's does; LoRA's layers are megatron's own (megarl/models/spec.py). `TORCHDYNAMO_DISABLE=1` turns all
compilation off.
"""

from __future__ import annotations

import functools
import warnings

import torch
from megatron.core.transformer.transformer_layer import TransformerLayer

# Compiled variants one layer's code may have in a process. Each is reached once and never recompiled for a new
# micro-batch shape (dynamic shapes): training, no-grad and frozen-weight passes; the first layer's input strides
# and RoPE tables; other models' sizes (a critic, a reward model). torch's default of 8 would leave later variants
# to run eagerly, silently.
RECOMPILE_LIMIT = 64


def compiles_layers(config) -> bool:
    layout = (config.tensor_model_parallel_size, config.pipeline_model_parallel_size, config.context_parallel_size)
    return torch.cuda.is_available() and not config.num_moe_experts and layout == (1, 1, 1)


class CompiledTransformerLayer(TransformerLayer):
    """megatron's TransformerLayer; on one GPU's model (TP, PP and CP 1) its calls run torch.compile'd (dynamic
    shapes)."""

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        if compiles_layers(config):
            _configure_dynamo()
            self.compile(dynamic=True)


@functools.cache
def _configure_dynamo() -> None:
    # megatron's row-parallel linear layers pass no tensor-parallel group, and every call warns that one will be
    # required. dynamo cannot trace `warnings.warn`, so each layer would split in two there: warnings inside
    # compiled code are dropped instead (eager code still warns).
    @torch.compiler.substitute_in_graph(warnings.warn, skip_signature_check=True)
    def _warn_in_graph(message, category=None, stacklevel=1, source=None, **kwargs):
        return None

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
