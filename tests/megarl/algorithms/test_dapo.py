import pytest
import torch

from megarl.algorithms.dapo import groups_with_signal, overlong_penalty, trained_group_count


def test_overlong_penalty_is_zero_before_the_buffer_and_falls_linearly_to_the_factor():
    lengths = torch.tensor([0, 10, 12, 14, 16, 20])
    # max 20, buffer 8: free up to 12 tokens, then −1.5 × (length − 12) / 8
    expected = torch.tensor([0.0, 0.0, 0.0, -0.375, -0.75, -1.5])
    assert torch.allclose(overlong_penalty(lengths, 20, 8, 1.5), expected)


def test_groups_whose_samples_all_score_the_same_carry_no_signal():
    uids = ["a", "a", "b", "b", "c", "c", "d"]
    values = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    assert groups_with_signal(uids, values) == ["b", "d"]  # d: a single sample counts (verl's rule)


@pytest.mark.parametrize(("kept", "expected"), [(9, 8), (8, 8), (7, 6), (3, 2), (1, 2), (0, 2)])
def test_a_short_batch_trains_on_whole_mini_batches(kept, expected):
    assert trained_group_count(kept, target=8, multiple=2) == expected
