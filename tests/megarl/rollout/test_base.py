"""megarl/rollout/base.py: the engines' sampling parameters from a recipe's rollout section."""

from megarl.config import load_config
from megarl.rollout import SamplingParams


def test_ignore_eos_runs_training_samples_to_full_length_and_leaves_validation_alone():
    rollout = load_config(overrides=["rollout.ignore_eos=true", "rollout.n=4", "rollout.top_k=5",
                                     "rollout.val_kwargs.do_sample=true"]).rollout
    training = SamplingParams.for_training(rollout, max_new_tokens=16, seed=3)
    assert (training.ignore_eos, training.n, training.top_k, training.max_new_tokens) == (True, 4, 5, 16)
    assert not SamplingParams.for_validation(rollout, max_new_tokens=16).ignore_eos
    assert not SamplingParams.for_training(load_config().rollout, max_new_tokens=16).ignore_eos
