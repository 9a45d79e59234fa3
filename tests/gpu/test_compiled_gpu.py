"""GPU: the torch.compile'd kernels (the GPU's default) equal the eager ops they fuse, forward and backward, in bf16:
the log-prob/entropy chunks (megarl/models/logprobs.py) at Qwen3's vocabulary, with either output's gradient alone or
both; the packed RoPE (megarl/models/rotary.py) and the query/key norm (megarl/models/qk_norm.py) at Qwen3's heads.
And the fused log-prob passes, which take every token at once, hold no float32 copy of the logits.

The compiled decoder layers (megarl/models/compiled_layer.py) trace whole, compile once per kind of pass, and keep
the trainer's bf16 error against float32 at HF transformers' own."""

import json
from pathlib import Path

import pytest
import torch

from megarl.models import qk_norm, rotary
from megarl.models.logprobs import vocab_parallel_logprobs_and_entropy
from tests.helpers import GPU0_ENV, run_layout, run_one_rank

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the device machines)")


def assert_close(eager: torch.Tensor, fused: torch.Tensor, tolerance: float) -> None:
    """Within `tolerance` of the eager result's largest magnitude (bf16: about one step, 2^-8, of it)."""
    error, scale = (eager.float() - fused.float()).abs().max().item(), eager.float().abs().max().item()
    assert error <= tolerance * max(scale, 1.0), (error, scale)


@pytest.mark.parametrize("terms", ["logprobs", "entropy", "both"])
def test_compiled_logprob_chunks_equal_the_eager_ones(terms):
    generator = torch.Generator(device="cuda").manual_seed(0)
    tokens, vocab = 1500, 151936
    logits = 4 * torch.randn(1, tokens, vocab, device="cuda", dtype=torch.bfloat16, generator=generator)
    labels = torch.randint(0, vocab, (1, tokens), device="cuda", generator=generator)
    weights = torch.randn(2, tokens, device="cuda", generator=generator)
    results = []
    for fused in (False, True):
        x = logits.clone().requires_grad_(True)
        logprobs, entropy = vocab_parallel_logprobs_and_entropy(x, labels, 0.7, with_entropy=True, fused=fused)
        loss = {"logprobs": (logprobs * weights[0]).sum(), "entropy": (entropy * weights[1]).sum(),
                "both": (logprobs * weights[0]).sum() + (entropy * weights[1]).sum()}[terms]
        loss.backward()
        results.append((logprobs.detach(), entropy.detach(), x.grad))
    for eager, fused, tolerance in zip(*results, (1e-5, 1e-5, 1e-2)):
        assert_close(eager, fused, tolerance)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_compiled_rotation_and_query_key_norm_equal_the_eager_ones(dtype):
    generator = torch.Generator(device="cuda").manual_seed(1)
    tokens, heads, dim = 3000, 16, 128
    x = torch.randn(tokens, heads, dim, device="cuda", generator=generator).to(dtype)
    weight = (1 + 0.1 * torch.randn(dim, device="cuda", generator=generator)).to(dtype)
    angles = 50 * torch.rand(tokens, 1, dim, device="cuda", generator=generator)
    grad = torch.randn(tokens, heads, dim, device="cuda", generator=generator)
    results = []
    for version in ("eager", "compiled"):
        norm, rotate = getattr(qk_norm._norm, version), getattr(rotary._rotate, version)
        inputs = [x.clone().requires_grad_(True), weight.clone().requires_grad_(True)]
        normed = norm(*inputs, 1e-6)
        out = rotate(normed, angles.cos(), angles.sin(), torch.bfloat16)
        (out.float() * grad).sum().backward()
        results.append((normed.detach(), out.detach(), inputs[0].grad, inputs[1].grad))
    for eager, fused in zip(*results):
        assert_close(eager, fused, 1e-2)


def test_the_fused_log_prob_passes_hold_no_float32_copy_of_the_logits():
    """Fused, forward and backward run over every token at once: beyond the logits, the only large tensor is their
    bf16 gradient. A float32 [tokens × vocabulary] temporary would add twice the logits' size."""
    generator = torch.Generator(device="cuda").manual_seed(2)
    tokens, vocab = 6000, 151936
    logits = 4 * torch.randn(tokens, vocab, device="cuda", dtype=torch.bfloat16, generator=generator)
    labels = torch.randint(0, vocab, (tokens,), device="cuda", generator=generator)

    def fused_pass():
        x = logits.detach().requires_grad_(True)
        logprobs, entropy = vocab_parallel_logprobs_and_entropy(x, labels, 0.7)
        (logprobs.sum() + 0.1 * entropy.sum()).backward()
        return x.grad

    fused_pass()  # compiles
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    grad = fused_pass()
    extra = torch.cuda.max_memory_allocated() - base
    assert grad.dtype == torch.bfloat16
    assert extra <= 1.1 * logits.numel() * logits.element_size(), (extra, logits.numel() * logits.element_size())


@pytest.fixture(scope="module")
def compiled_layers(tmp_path_factory):
    from megarl.models.init_model import write_model

    root = tmp_path_factory.mktemp("compiled_layers")
    model = write_model("qwen2.5-0.5b", root / "model", dtype=torch.bfloat16, num_hidden_layers=6)
    result = run_one_rank(Path(__file__).with_name("compiled_layers_worker.py"), model, out=root / "out.json",
                          env=GPU0_ENV, timeout=600)
    layout = run_layout(model, root / "single.json", 1, 1, 1, nproc=1, extra=["--bf16", "--length-scale", "32"],
                        timeout=600)
    print(json.dumps(result), layout["hf_mean_abs_diff"], layout["hf_bf16_mean_abs_diff"])
    return result, layout


def test_compiled_layers_trace_whole_and_compile_once_per_kind_of_pass(compiled_layers):
    """No graph break in any role's pass; micro-batches of new token counts, sequence counts and longest sequences
    reuse the graphs compiled in the warm-up (a recompile per shape would be slow, and past the limit eager)."""
    result, _ = compiled_layers
    assert result["graph_breaks"] == 0, result
    assert result["graphs_after_new_shapes"] == result["graphs_after_warm_up"], result


def test_compiled_layers_keep_the_bf16_error_of_hf_transformers(compiled_layers):
    """The single-GPU layout of test_models_gpu.py's gate (log-probs against float32 within 1.5x HF bf16's error),
    with compiled layers; compiled and eager differ by no more than two bf16 errors."""
    result, layout = compiled_layers
    assert layout["hf_mean_abs_diff"] <= 1.5 * layout["hf_bf16_mean_abs_diff"], layout
    assert layout["hf_max_abs_diff"] <= 1.5 * layout["hf_bf16_max_abs_diff"], layout
    assert result["logprob_mean_abs_diff_vs_eager"] <= 2 * layout["hf_bf16_mean_abs_diff"], (result, layout)
