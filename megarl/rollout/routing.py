"""The engines' routed experts (router replay, R3): SGLang's encoding of them, read back."""

from __future__ import annotations

import base64

import torch


def decode_sglang_routing(meta: dict, routing_shape: tuple[int, int]) -> torch.Tensor:
    """SGLang's `meta_info["routed_experts"]` (a request with return_routed_experts, on an engine started with
    enable_return_routed_experts): base64 of its int32 capture, for each token of [0, prompt + output − 1) (the last
    output token is never forwarded), each layer's top-k expert ids → [tokens, layers, top-k] with `routing_shape`
    (layers, top-k)."""
    encoded = meta.get("routed_experts")
    if encoded is None:
        raise RuntimeError("SGLang returned no routed experts: the engine needs enable_return_routed_experts")
    flat = torch.frombuffer(bytearray(base64.b64decode(encoded)), dtype=torch.int32)
    return flat.view(-1, *routing_shape)
