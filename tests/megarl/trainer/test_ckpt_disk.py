"""The disk a run's checkpoints take, estimated at start against the output directory's free space."""

import json

import datasets
import pytest

from megarl.config import load_config
from megarl.models.shapes import SHAPES
from megarl.trainer.ckpt_disk import checkpoint_bytes, disk_warning, saves_after


@pytest.fixture
def recipe(tmp_path):
    """Overrides of a GRPO run of Qwen2.5-0.5B's shape (its config.json only) over 10 prompts, 2 a step."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(SHAPES["qwen2.5-0.5b"]))
    data = tmp_path / "train.parquet"
    datasets.Dataset.from_list([{"prompt": "q", "data_source": "d", "reward_model": {"ground_truth": "1"}}] * 10
                               ).to_parquet(str(data))
    return [f"model.path={model}", f"data.train_files=[{data}]", f"trainer.output_dir={tmp_path / 'out'}",
            "algorithm.adv_estimator=grpo", "rollout.n=2", "data.train_batch_size=2", "actor.ppo_mini_batch_size=2",
            "trainer.save_freq=2"]


def test_a_checkpoint_holds_weights_and_adam_state_of_every_trained_parameter(recipe):
    grpo = load_config(overrides=recipe)
    parameters = 494_032_768  # Qwen2.5-0.5B, tied embeddings
    assert checkpoint_bytes(grpo, bf16=True) == parameters * 14
    assert checkpoint_bytes(grpo, bf16=False) == parameters * 16
    ppo = load_config(overrides=[*recipe, "algorithm.adv_estimator=gae"])  # the critic too: a value head, no LM head
    assert checkpoint_bytes(ppo, bf16=True) == (2 * parameters + 896) * 14
    lora = load_config(overrides=[*recipe, "actor.lora.rank=8", "actor.megatron.param_offload=false"])
    assert checkpoint_bytes(lora, bf16=True) < parameters * 14 / 50  # the adapters alone


def test_saves_every_save_freq_steps_and_at_the_last_after_the_resumed_step(recipe):
    assert saves_after(load_config(overrides=[*recipe, "trainer.total_epochs=3"]), start=0) == 8  # 2, 4, ... 14, 15
    assert saves_after(load_config(overrides=[*recipe, "trainer.total_epochs=3"]), start=10) == 3  # 12, 14, 15
    assert saves_after(load_config(overrides=[*recipe, "trainer.save_freq=-1"]), start=0) == 0


def test_the_warning_names_what_fits(recipe):
    cfg = load_config(overrides=[*recipe, "trainer.total_training_steps=20"])  # 10 checkpoints of 6.92 GB
    size = checkpoint_bytes(cfg, bf16=True)
    assert disk_warning(cfg, bf16=True, free=10 * size) is None
    line = disk_warning(cfg, bf16=True, free=5 * size)
    assert line.startswith("warning: trainer.save_freq=2 saves 10 checkpoints of about 6.92 GB each (69.2 GB; trainer."
                           "max_ckpt_to_keep unset keeps every one, as in verl), but ")
    assert line.endswith("has 34.6 GB free: set trainer.max_ckpt_to_keep=4 (what fits), or point trainer.output_dir "
                         "at a larger disk")
    kept = load_config(overrides=[*recipe, "trainer.total_training_steps=20", "trainer.max_ckpt_to_keep=3"])
    assert disk_warning(kept, bf16=True, free=4 * size) is None  # 3 kept and one being written
    assert "trainer.max_ckpt_to_keep=3 holds 4 checkpoints" in disk_warning(kept, bf16=True, free=3 * size)
    assert "not even one fits there" in disk_warning(kept, bf16=True, free=size)
