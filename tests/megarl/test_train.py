import json

import datasets
import pytest

from megarl.config import load_config
from megarl.train import main


@pytest.fixture
def runnable(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_attention_heads": 4, "num_key_value_heads": 2,
                                                   "num_hidden_layers": 2}))
    data = tmp_path / "train.parquet"
    datasets.Dataset.from_list([{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "q"}],
                                 "reward_model": {"ground_truth": "1"}}]).to_parquet(str(data))
    return [f"model.path={model}", f"data.train_files=[{data}]", f"trainer.output_dir={tmp_path / 'run'}",
            "algorithm.adv_estimator=grpo", "rollout.n=4", "data.train_batch_size=4", "actor.ppo_mini_batch_size=2"]


def test_dry_run_writes_the_resolved_config(runnable, tmp_path, capsys):
    assert main(["--dry-run", *runnable]) == 0
    written = tmp_path / "run" / "config.yaml"
    assert f"resolved config written to {written}" in capsys.readouterr().out
    assert load_config(written) == load_config(overrides=runnable)


def test_bad_input_is_an_error_naming_the_key(runnable, tmp_path, capsys):
    assert main(["--dry-run", *runnable, "rollout.nn=3"]) == 2
    assert "unknown key 'rollout.nn'. Did you mean rollout.n" in capsys.readouterr().err
    assert main(["--dry-run", *runnable, f"model.path={tmp_path / 'absent'}", "data.val_files=[v.parquet]"]) == 2
    err = capsys.readouterr().err
    assert "model.path=" in err and "is not a HF checkpoint directory" in err
    assert "data.val_files: v.parquet does not exist" in err
    assert main(["--dry-run", "--recipe", str(tmp_path / "none.yaml")]) == 2
    assert "recipe" in capsys.readouterr().err
    assert not (tmp_path / "run" / "config.yaml").exists()


def test_malformed_parquet_stops_before_any_worker_starts(runnable, tmp_path, capsys):
    from megarl.models.init_model import write_model

    runnable = [*runnable, f"model.path={write_model('tiny', tmp_path / 'tiny')}", "data.max_prompt_length=16",
                "data.max_response_length=8"]
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    assert main([*runnable, f"data.train_files=[{broken}]"]) == 2
    assert f"{broken} is not a readable parquet file" in capsys.readouterr().err
    no_truth = tmp_path / "no_truth.parquet"
    datasets.Dataset.from_list([{"data_source": "openai/gsm8k", "prompt": "q"}]).to_parquet(str(no_truth))
    assert main([*runnable, f"data.train_files=[{no_truth}]"]) == 2
    assert "missing column(s) ['reward_model']" in capsys.readouterr().err


def test_a_resume_path_that_is_no_checkpoint_is_an_error_before_anything_starts(runnable, tmp_path, capsys):
    absent = tmp_path / "run" / "checkpoints" / "global_step_5"
    assert main([*runnable, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={absent}"]) == 2
    assert f"error: trainer.resume_from_path={absent} does not exist" in capsys.readouterr().err
