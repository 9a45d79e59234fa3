"""What the RL and SFT loops share."""

import pytest

from megarl.config import ConfigError
from megarl.config.schema import ModelConfig, RunConfig
from megarl.models.tokenizer import load_tokenizer
from megarl.trainer.scaffold import endless, total_steps, validates_at


def test_total_steps_from_epochs_unless_set():
    assert total_steps(RunConfig(total_epochs=3), batches_per_epoch=5) == 15
    assert total_steps(RunConfig(total_epochs=3, total_training_steps=4), batches_per_epoch=5) == 4


def test_endless_goes_epoch_after_epoch():
    batches = endless([1, 2])
    assert [next(batches) for _ in range(5)] == [1, 2, 1, 2, 1]


def test_validation_every_test_freq_steps_and_after_the_last():
    assert [s for s in range(1, 8) if validates_at(s, 7, 3)] == [3, 6, 7]
    assert [s for s in range(1, 8) if validates_at(s, 7, -1)] == [7]


def test_a_missing_tokenizer_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match="(?s)model.path=.*point model.tokenizer_path"):
        load_tokenizer(ModelConfig(path=str(tmp_path)))
    with pytest.raises(ConfigError, match="model.tokenizer_path="):
        load_tokenizer(ModelConfig(path=str(tmp_path), tokenizer_path=str(tmp_path / "tok")))
