"""How far the rollout engine's log-probs of the sampled tokens are from the trainer's (NeMo-RL's gate):
a mismatch means the engine samples from another policy than the one being trained (stale or wrongly
resharded weights, numerics), which biases every update without failing anything."""

from __future__ import annotations

import torch


def logprob_agreement(rollout_logprobs: torch.Tensor, trainer_logprobs: torch.Tensor,
                      mask: torch.Tensor) -> dict[str, float]:
    """`rollout/logprob_mult_error`: mean over response tokens of exp(|Δ log p|) (1 is exact; ≲ 1.05 is bf16's
    level), and `rollout/logprob_max_abs_diff`."""
    mask = mask.bool()
    diff = (rollout_logprobs.float() - trainer_logprobs.float()).abs()[mask]
    if diff.numel() == 0:
        return {"rollout/logprob_mult_error": 1.0, "rollout/logprob_max_abs_diff": 0.0}
    return {"rollout/logprob_mult_error": diff.exp().mean().item(), "rollout/logprob_max_abs_diff": diff.max().item()}


def check_logprob_agreement(metrics: dict[str, float], limit: float) -> None:
    """Raise when `rollout/logprob_mult_error` exceeds `limit`."""
    error = metrics["rollout/logprob_mult_error"]
    if error > limit:
        raise RuntimeError(
            f"rollout/logprob_mult_error={error:.4f} exceeds {limit}: the rollout engine's log-probs disagree with "
            f"the trainer's (max |Δ| {metrics['rollout/logprob_max_abs_diff']:.4f}); check the weight sync"
        )
