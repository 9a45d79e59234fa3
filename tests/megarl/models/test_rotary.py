"""megarl.models.rotary: the local spec's self-attention leaves RoPE over packed sequences to its core attention, with
the same results as megatron's own RoPE, bit for bit, where the query and key are float32; in bf16, where megatron
rounds after each operation and megarl once, closer to the float32 result than megatron's."""

from pathlib import Path

from tests.helpers import worker_result

WORKER = Path(__file__).with_name("rotary_worker.py")


def test_rotary_in_core_attention_is_megatrons_rope():
    result = worker_result(WORKER)
    assert len(result) == 4
    for case, r in result.items():
        assert r["rotated_in_core"], case  # the tables were made: the core attention rotated
        assert r["rope_matters"] > 1e-2, case  # the comparison would see a missing rotation
        if case == "torch.bfloat16-plain":
            assert r["error"] <= r["megatron_error"] and r["max_abs_diff"] <= 0.05 * r["rope_matters"], (case, r)
        else:
            assert r["max_abs_diff"] == 0.0, (case, r)
