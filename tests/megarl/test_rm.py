"""`megarl rm`: the recipe, the dry run (which reads the rankings) and errors that name the key, the row and the
fix. The training itself: tests/megarl/trainer/test_rm_loop.py."""

import json
import os
import subprocess
import sys

import datasets
import pytest

from megarl.cli import main as cli_main
from megarl.config import RM_RECIPE, ConfigError, load_config
from megarl.rm import main
from tests.helpers import REPO_ROOT, make_tokenizer


@pytest.fixture
def runnable(tmp_path):
    """A model directory (config and tokenizer: bad inputs fail before weights are read) and one data file."""
    model = tmp_path / "model"
    make_tokenizer(model)
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2", "num_attention_heads": 4,
                                                   "num_key_value_heads": 2, "num_hidden_layers": 2,
                                                   "max_position_embeddings": 256}))
    data = tmp_path / "train.parquet"
    rows = [{"prompt": [{"role": "user", "content": f"{i} + {i}?"}], "responses": [f"#### {2 * i}", f"= {2 * i}"]}
            for i in range(2)]
    datasets.Dataset.from_list(rows).to_parquet(str(data))
    return [f"model.path={model}", f"data.train_files=[{data}]", f"trainer.output_dir={tmp_path / 'run'}",
            "data.train_batch_size=2", "data.micro_batch_size_per_gpu=1", "data.max_length=64"]


def write_rows(path, rows):
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    return path


def test_dry_run_writes_the_resolved_config(runnable, tmp_path, capsys):
    assert main(["--dry-run", *runnable, "rm.margin=0.5"]) == 0
    written = tmp_path / "run" / "config.yaml"
    assert f"resolved config written to {written}" in capsys.readouterr().out
    assert load_config(written, schema=RM_RECIPE) == load_config(overrides=[*runnable, "rm.margin=0.5"],
                                                                schema=RM_RECIPE)


def test_dry_run_refuses_a_tie_naming_the_row(runnable, tmp_path, capsys):
    ties = write_rows(tmp_path / "ties.parquet", [{"prompt": "p", "chosen": "#### 4", "rejected": "= 4"},
                                                  {"prompt": "q", "chosen": "#### 5", "rejected": "#### 5 "}])
    assert main(["--dry-run", *runnable, f"data.val_files=[{ties}]"]) == 2
    err = capsys.readouterr().err
    assert f"data.val_files: {ties} row 1: chosen and rejected are the same response ('#### 5')" in err
    assert "Keep one of them" in err


def test_dry_run_reads_the_data_files_columns(runnable, tmp_path, capsys):
    assert main(["--dry-run", *runnable, "data.responses_key=ranked"]) == 2
    err = capsys.readouterr().err
    assert "no ranked responses: rows need a column 'ranked'" in err and "Set data.responses_key" in err


def test_bad_inputs_are_errors_naming_the_fix(runnable, tmp_path, capsys):
    assert main([*runnable, "model.partial_pretrain=/m"]) == 2
    assert "in megarl it is model.path" in capsys.readouterr().err
    assert main([*runnable, "model.enable_gradient_checkpointing=true"]) == 2
    assert "in megarl it is critic.megatron.recompute_granularity" in capsys.readouterr().err
    assert main([*runnable, f"model.path={tmp_path / 'absent'}"]) == 2
    assert "is not a HF checkpoint directory (no config.json there)" in capsys.readouterr().err
    assert main([*runnable, "data.train_batch_size=4"]) == 2
    assert "data.train_batch_size=4 is more than the 2 rankings in data.train_files" in capsys.readouterr().err
    assert main([*runnable, "data.max_length=6"]) == 2
    assert "row 0: prompt + responses[0] + eos is" in capsys.readouterr().err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize("override, message", [
    ("rm.margin=-1", "rm.margin=-1.0 must be ≥ 0"),
    ("data.train_batch_size=3", "data.train_batch_size=3 cannot be split over 2 data-parallel ranks"),
    ("data.micro_batch_size_per_gpu=3", "data.micro_batch_size_per_gpu=3 does not divide the 4 rankings"),
    ("critic.megatron.tensor_model_parallel_size=3", "critic.megatron: tensor × pipeline × context parallel = 3"),
    ("data.val_batch_size=0", "data.val_batch_size=0 must be at least 1"),
    ("data.chosen_key=''", "data.chosen_key is empty"),
    ("data.response_key=x", "unknown key 'data.response_key'. That is verl's name; megarl has no data.response_key. "
                             "Did you mean data.responses_key"),
])
def test_recipe_problems_name_the_key(override, message):
    with pytest.raises(ConfigError, match=message.replace("+", r"\+").replace("(", r"\(")):
        load_config(overrides=["trainer.n_gpus_per_node=2", "data.train_batch_size=8", override], schema=RM_RECIPE)


def test_the_bundled_tiny_recipe_loads():
    cfg = load_config(REPO_ROOT / "recipes" / "tiny_cpu_rm.yaml", schema=RM_RECIPE)
    assert cfg.model.path == "outputs/tiny_cpu/sft/hf" and cfg.trainer.output_dir == "outputs/tiny_cpu/rm"
    assert cfg.data.train_files == ["outputs/tiny_cpu/data/rankings_train.parquet"]


def test_megarl_rm_command_exits_2_on_a_tie_without_a_traceback(runnable, tmp_path):
    ties = write_rows(tmp_path / "ties.parquet", [{"prompt": "p", "responses": ["a", "b", " b"]}])
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-m", "megarl.cli", "rm", "--dry-run", *runnable,
                           f"data.train_files=[{ties}]"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"{ties} row 0: responses[1] and responses[2] are the same response" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_help_keys_lists_the_rm_keys(capsys):
    assert cli_main(["rm", "--help-keys"]) == 0
    out = capsys.readouterr().out
    assert "data.responses_key = responses" in out and "rm.margin = 0.0" in out
    assert "critic.megatron.tensor_model_parallel_size = 1" in out
