"""megarl.models.qk_norm: Qwen3's query/key norms hand megatron's RoPE float32, which rotates in float32; the
rotated query and key are rounded once, in SDPAttention (benchmarks/logprob_layers.py shows the effect on a model)."""

from pathlib import Path

from tests.helpers import worker_result

WORKER = Path(__file__).with_name("qk_norm_worker.py")


def test_rope_after_the_query_key_norm_rotates_in_float32_and_rounds_once():
    result = worker_result(WORKER)
    assert result["norm_dtype"] == "torch.float32" and result["rope_dtype"] == "torch.float32"
    assert result["norm_vs_model_dtype_norm"] <= 2 ** -7  # the same norm; at most one bf16 rounding apart
    # One rounding of the rotated values against bf16 cos/sin, two rounded products and a rounded sum.
    assert result["rope_error_float32"] < 0.8 * result["rope_error_bf16"], result
    assert result["attention_dtype"] == "torch.bfloat16" and result["attention_same_as_rounded_input"]
