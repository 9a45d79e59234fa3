"""The reward model's ranking loss against sums written out by hand."""

import math

import pytest
import torch

from megarl.algorithms import ranking_loss, ranking_terms


def neg_log_sigmoid(x: float) -> float:
    return -math.log(1 / (1 + math.exp(-x)))


SCORES = [2.0, 0.5, 1.0, -1.5]  # best first; pair (2, 3) is out of order
PAIRS = [(i, j) for i in range(4) for j in range(i + 1, 4)]


@pytest.mark.parametrize("margin", [0.0, 0.7])
def test_a_ranking_of_four_is_the_mean_over_its_six_pairs(margin):
    by_hand = sum(neg_log_sigmoid(SCORES[i] - SCORES[j] - margin) for i, j in PAIRS) / 6
    loss = ranking_loss(torch.tensor(SCORES, dtype=torch.float64), [4], margin)
    assert loss.item() == pytest.approx(by_hand, rel=1e-12)


def test_a_pair_is_the_pairwise_loss():
    chosen, rejected = torch.tensor(0.3, dtype=torch.float64), torch.tensor(1.1, dtype=torch.float64)
    loss = ranking_loss(torch.stack([chosen, rejected]), [2])
    assert loss.item() == pytest.approx(-torch.nn.functional.logsigmoid(chosen - rejected).item(), rel=1e-12)


def test_accuracy_and_the_rewards_of_each_pairs_better_and_worse_response():
    terms = ranking_terms(torch.tensor(SCORES), [4])
    in_order = sum(SCORES[i] > SCORES[j] for i, j in PAIRS)
    assert terms.accuracy.item() == pytest.approx(in_order / 6) and in_order == 5
    assert terms.chosen_reward.item() == pytest.approx(sum(SCORES[i] for i, _ in PAIRS) / 6)
    assert terms.rejected_reward.item() == pytest.approx(sum(SCORES[j] for _, j in PAIRS) / 6)
    assert ranking_terms(torch.tensor([1.0, 1.0]), [2]).accuracy.item() == 0.0  # a tie in score is not in order


def test_each_ranking_weighs_the_same_whatever_its_size():
    four, two = torch.tensor(SCORES), torch.tensor([-0.2, 0.4])
    loss = ranking_loss(torch.cat([four, two]), [4, 2], margin=0.1)
    expected = (ranking_loss(four, [4], 0.1) + ranking_loss(two, [2], 0.1)) / 2
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert ranking_terms(torch.cat([four, two]), [4, 2]).loss.shape == (2,)


def test_gradients_push_the_better_response_up():
    scores = torch.tensor([0.0, 0.0, 0.0], requires_grad=True)
    ranking_loss(scores, [3]).backward()
    assert scores.grad[0] < 0 < scores.grad[2] and scores.grad[1] == pytest.approx(0.0, abs=1e-7)


def test_sizes_must_match_the_scores():
    with pytest.raises(ValueError, match="3 scores for rankings of 4 responses"):
        ranking_terms(torch.zeros(3), [2, 2])
    with pytest.raises(ValueError, match="at least two responses"):
        ranking_terms(torch.zeros(3), [2, 1])
