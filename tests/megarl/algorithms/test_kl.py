import pytest
import torch

from megarl.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    kl_penalty,
    make_kl_controller,
)

LOGP = torch.tensor([[-1.0, -0.5, -3.0]])
REF = torch.tensor([[-1.5, -0.5, -1.0]])


def test_estimators_and_aliases():
    diff = LOGP - REF
    torch.testing.assert_close(kl_penalty(LOGP, REF, "kl"), diff)
    torch.testing.assert_close(kl_penalty(LOGP, REF, "k1"), diff)
    torch.testing.assert_close(kl_penalty(LOGP, REF, "abs"), diff.abs())
    torch.testing.assert_close(kl_penalty(LOGP, REF, "mse"), 0.5 * diff**2)
    torch.testing.assert_close(kl_penalty(LOGP, REF, "k2"), 0.5 * diff**2)
    k3 = torch.exp(REF - LOGP) - (REF - LOGP) - 1
    torch.testing.assert_close(kl_penalty(LOGP, REF, "low_var_kl"), k3)
    torch.testing.assert_close(kl_penalty(LOGP, REF, "k3"), k3)


def test_low_var_kl_is_non_negative_zero_at_equality_and_clamped():
    a = torch.randn(1000) * 5
    b = torch.randn(1000) * 5
    k3 = kl_penalty(a, b, "low_var_kl")
    assert (k3 >= 0).all() and (k3 <= 10).all()
    assert kl_penalty(a, a, "low_var_kl").abs().max() == 0
    with pytest.raises(ValueError, match="unknown KL estimator 'full'"):
        kl_penalty(a, b, "full")


def test_controllers():
    fixed = make_kl_controller("fixed", kl_coef=0.1, target_kl=1.0, horizon=10)
    fixed.update(current_kl=5.0, n_steps=100)
    assert isinstance(fixed, FixedKLController) and fixed.value == 0.1
    adaptive = make_kl_controller("adaptive", kl_coef=0.1, target_kl=1.0, horizon=100)
    assert isinstance(adaptive, AdaptiveKLController)
    adaptive.update(current_kl=1.1, n_steps=10)  # 10% above target → ×(1 + 0.1·10/100)
    assert adaptive.value == pytest.approx(0.1 * 1.01)
    adaptive.update(current_kl=100.0, n_steps=10)  # error clipped at +0.2
    assert adaptive.value == pytest.approx(0.1 * 1.01 * 1.02)
    restored = AdaptiveKLController(0.5, 1.0, 100)
    restored.load_state_dict(adaptive.state_dict())
    assert restored.value == adaptive.value
    with pytest.raises(ValueError, match="unknown KL controller type"):
        make_kl_controller("pid", 0.1, 1.0, 10)


def test_apply_kl_penalty_subtracts_masked_kl():
    scores = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    old = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]])
    ref = torch.tensor([[-2.0, -1.0, -1.5], [-1.5, -1.5, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    rewards, current_kl = apply_kl_penalty(scores, old, ref, mask, kl_coef=0.1, kl_penalty_type="kl")
    torch.testing.assert_close(rewards, torch.tensor([[-0.1, 0.0, 0.95], [-0.05, 1.95, 0.0]]))
    assert current_kl == pytest.approx(((1.0 + 0.0 + 0.5) / 3 + (0.5 + 0.5) / 2) / 2)
