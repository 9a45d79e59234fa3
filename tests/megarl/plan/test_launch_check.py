"""`megarl train` runs the memory plan before any worker starts: a recipe that cannot fit is refused with the table
and the way around the check; a machine without GPUs is not checked."""

import json

import datasets
import pytest

from megarl import train
from megarl.models.shapes import SHAPES
from megarl.plan import check
from tests.helpers import make_tokenizer


@pytest.fixture
def qwen3_8b_run(tmp_path, monkeypatch):
    """Overrides of a Qwen3-8B GRPO run: a model directory holding only config.json, one prompt; no worker may start."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(SHAPES["qwen3-8b"]))
    make_tokenizer(model)
    data = tmp_path / "train.parquet"
    datasets.Dataset.from_list([{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "q"}],
                                 "reward_model": {"ground_truth": "1"}}]).to_parquet(str(data))

    def no_workers(cfg):
        raise AssertionError("a worker was started")

    monkeypatch.setattr(train, "run", no_workers)
    monkeypatch.setattr(check, "host_memory_gib", lambda: 512.0)  # a GPU node's, not this test machine's
    return ["--recipe", "recipes/qwen3_8b_grpo_gsm8k_4gpu.yaml", f"model.path={model}", f"data.train_files=[{data}]",
            "data.val_files=[]", f"trainer.output_dir={tmp_path / 'run'}", "actor.megatron.optimizer_offload=false"]


def test_a_run_that_cannot_fit_is_refused_before_any_worker_starts(qwen3_8b_run, capsys):
    assert train.main(qwen3_8b_run, gpu_gib=24.0) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the run is predicted not to fit in memory:")
    assert "update_actor" in err and " NO " in err
    assert "cheapest change that fits: actor.megatron.optimizer_offload=true" in err
    assert "set trainer.memory_check=false to launch anyway" in err


def test_a_tight_update_launches_with_a_warning(qwen3_8b_run, capsys):
    # optimizer and gradient offload, a 6,144-token update budget: the update fits 24 GiB (21.8 GiB planned), within
    # the update plan's error of it
    assert train.main(["--dry-run", *qwen3_8b_run, "actor.megatron.optimizer_offload=true",
                       "actor.megatron.grad_offload=true", "actor.ppo_max_token_len_per_gpu=6144"], gpu_gib=24.0) == 0
    err = capsys.readouterr().err
    assert "memory plan: tight: update_actor" in err and "(megarl plan shows the table)" in err


def test_the_24_gb_recipe_passes_its_launch_check_on_24_gib_gpus(qwen3_8b_run, capsys):
    recipe = ["--recipe", "recipes/qwen3_8b_grpo_gsm8k_4gpu_24gb.yaml"]
    own = [arg for arg in qwen3_8b_run[2:] if not arg.startswith("actor.megatron.")]  # the recipe's own offloads
    assert train.main(["--dry-run", *recipe, *own], gpu_gib=24.0) == 0
    assert "memory plan" not in capsys.readouterr().err  # no update within the plan's error of the GPU's memory


def test_memory_check_false_launches_anyway(qwen3_8b_run, capsys):
    assert train.main(["--dry-run", *qwen3_8b_run, "trainer.memory_check=false"], gpu_gib=24.0) == 0


def test_no_check_without_gpus(qwen3_8b_run, monkeypatch):
    monkeypatch.setattr(train, "gpu_memory_gib", lambda: None)  # nvidia-smi absent
    assert train.main(["--dry-run", *qwen3_8b_run]) == 0
