import json
import os
import subprocess
import sys

import datasets
import pytest

from megarl.cli import main as cli_main
from megarl.config import SFT_RECIPE, load_config
from megarl.sft import main
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
    datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": f"{i} + {i}?"}], "solution": f"{i + i}",
                                 "extra_info": {"index": i}} for i in range(2)]).to_parquet(str(data))
    return [f"model.path={model}", f"data.train_files=[{data}]", f"trainer.output_dir={tmp_path / 'run'}",
            "data.train_batch_size=2", "data.micro_batch_size_per_gpu=1", "data.max_length=64"]


def test_dry_run_writes_the_resolved_config(runnable, tmp_path, capsys):
    runnable = [*runnable, "data.response_key=solution"]  # the dry run reads the data files' columns
    assert main(["--dry-run", *runnable]) == 0
    written = tmp_path / "run" / "config.yaml"
    assert f"resolved config written to {written}" in capsys.readouterr().out
    assert load_config(written, schema=SFT_RECIPE) == load_config(overrides=runnable, schema=SFT_RECIPE)


def test_dry_run_reads_the_data_files_columns(runnable, capsys):
    assert main(["--dry-run", *runnable]) == 2
    assert "extra_info has no field 'answer' for data.response_key=extra_info.answer" in capsys.readouterr().err


def test_bad_inputs_are_errors_naming_the_fix(runnable, tmp_path, capsys):
    assert main([*runnable, f"model.path={tmp_path / 'absent'}", "model.partial_pretrain=/m"]) == 2
    err = capsys.readouterr().err
    assert "in megarl it is model.path" in err
    assert main([*runnable, f"model.path={tmp_path / 'absent'}"]) == 2
    assert "is not a HF checkpoint directory (no config.json there)" in capsys.readouterr().err
    assert main([*runnable, "data.val_files=[v.parquet]"]) == 2
    assert "data.val_files: v.parquet does not exist" in capsys.readouterr().err
    assert main([*runnable, "data.response_key=answer"]) == 2
    assert "no column 'answer' for data.response_key=answer" in capsys.readouterr().err
    assert main([*runnable, "data.response_key=solution", "data.train_batch_size=4"]) == 2
    assert "data.train_batch_size=4 is more than the 2 samples in data.train_files" in capsys.readouterr().err
    (tmp_path / "model" / "tokenizer.json").unlink()
    assert main([*runnable, "data.response_key=solution"]) == 2
    assert "the tokenizer loaded from there is empty" in capsys.readouterr().err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_megarl_sft_command_exits_2_on_a_missing_response_column(runnable):
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-m", "megarl.cli", "sft", *runnable], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "extra_info has no field 'answer' for data.response_key=extra_info.answer" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_help_keys_lists_the_sft_keys(capsys):
    assert cli_main(["sft", "--help-keys"]) == 0
    assert "data.response_key = extra_info.answer" in capsys.readouterr().out
