"""The reward model's ranking loss (InstructGPT §3.5): for a ranking of K responses, best first, with scores
r_1..r_K, the mean over its K(K−1)/2 pairs i < j of −log σ(r_i − r_j − margin). Each pair weighs 1/C(K, 2), so
every ranking counts once however many responses it ranks (InstructGPT: rankings are batch elements, not pairs,
which would overfit to the pairs of one prompt)."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import torch
import torch.nn.functional as F


class RankingTerms(NamedTuple):
    """Per ranking ([R] each): its loss, the fraction of its pairs scored in order, and the mean score of the
    better and of the worse response over its pairs."""

    loss: torch.Tensor
    accuracy: torch.Tensor
    chosen_reward: torch.Tensor
    rejected_reward: torch.Tensor


def ranking_terms(scores: torch.Tensor, sizes: Sequence[int], margin: float = 0.0) -> RankingTerms:
    """`scores` [ΣK]: the rankings' response scores one ranking after another, each best first; `sizes`: each
    ranking's K (at least 2). A tie in score counts as out of order."""
    if sum(sizes) != scores.numel():
        raise ValueError(f"{scores.numel()} scores for rankings of {sum(sizes)} responses")
    terms: list[tuple[torch.Tensor, ...]] = []
    for ranking in scores.split(list(sizes)):
        if ranking.numel() < 2:
            raise ValueError("a ranking needs at least two responses")
        better, worse = torch.triu_indices(ranking.numel(), ranking.numel(), offset=1, device=scores.device)
        gap = ranking[better] - ranking[worse]
        # −log σ(x) = softplus(−x), without σ underflowing to 0 for a badly misordered pair.
        terms.append((F.softplus(margin - gap).mean(), (gap > 0).float().mean(), ranking[better].mean(),
                      ranking[worse].mean()))
    return RankingTerms(*(torch.stack(column) for column in zip(*terms)))


def ranking_loss(scores: torch.Tensor, sizes: Sequence[int], margin: float = 0.0) -> torch.Tensor:
    """The batch loss: the mean over rankings of each ranking's loss."""
    return ranking_terms(scores, sizes, margin).loss.mean()
