"""benchmarks/attention_kernels.py's batch and FLOP count (the kernels themselves run on the device machines): the
lengths fill the token budget within their range, and the causal FLOPs are those of the attended pairs."""

import sys

from tests.helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import attention_kernels  # noqa: E402


def test_lengths_fill_the_budget_within_their_range():
    lengths = attention_kernels.draw_lengths(16384, 512, seed=0)
    assert sum(lengths) == 16384
    assert all(256 <= length <= 768 for length in lengths[:-1]) and 1 <= lengths[-1] <= 768
    assert lengths == attention_kernels.draw_lengths(16384, 512, seed=0)


def test_causal_forward_flops_count_the_attended_pairs():
    batch = attention_kernels.Batch(lengths=[300, 1000], heads=14, kv_heads=2, head_dim=64)
    pairs = sum(length * (length + 1) // 2 for length in batch.lengths)  # query i attends keys 0..i
    exact = 2 * 2 * pairs * batch.head_dim * batch.heads  # scores and weighted values, a multiply-add each
    assert abs(batch.forward_flops() - exact) / exact < 0.005
