"""GPU: packed causal attention in one FlashAttention varlen call equals the per-sequence SDPA loop it replaces,
forward and backward, in bf16, with grouped-query heads (megarl/models/attention.py)."""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the device machines)")


def test_varlen_equals_the_per_sequence_loop():
    from megarl.models.attention import SDPAttention, varlen_attn, varlen_causal

    assert varlen_attn is not None, "torch has no torch.nn.attention.varlen"
    lengths = [37, 5, 128, 64, 1, 90]
    heads, kv_heads, dim = 8, 2, 64
    attention = SDPAttention.__new__(SDPAttention)
    torch.nn.Module.__init__(attention)
    attention.softmax_scale = dim ** -0.5
    generator = torch.Generator(device="cuda").manual_seed(0)
    tokens = sum(lengths)

    def draw(h):
        return torch.randn(tokens, h, dim, device="cuda", dtype=torch.bfloat16, generator=generator,
                           requires_grad=True)

    q, k, v = draw(heads), draw(kv_heads), draw(kv_heads)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device="cuda")
    grad = torch.randn(tokens, heads * dim, device="cuda", dtype=torch.bfloat16, generator=generator)
    results = []
    for run in (lambda: attention._packed(q, k, v, lengths, 0.0),
                lambda: varlen_causal(q, k, v, cu, max(lengths), attention.softmax_scale)):
        out = run()
        q.grad = k.grad = v.grad = None
        out.backward(grad)
        results.append([out.detach().float(), q.grad.float(), k.grad.float(), v.grad.float()])
    for loop, fused in zip(*results):
        assert (loop - fused).abs().max().item() <= 2e-2 * max(loop.abs().max().item(), 1.0)
