import json
import os
import socket
import subprocess
import sys

import datasets
import pytest

from megarl.config import load_config
from megarl.run_lock import LOCK_NAME, RunLock
from megarl.train import main
from tests.helpers import REPO_ROOT, make_tokenizer


def model_config(model, **values):
    """A model directory's config.json (of a model with no weights: a dry run reads no more)."""
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2", "num_attention_heads": 4,
                                                   "num_key_value_heads": 2, "num_hidden_layers": 2,
                                                   "vocab_size": 512, **values}))
    return model


@pytest.fixture
def runnable(tmp_path):
    model = model_config(tmp_path / "model")
    make_tokenizer(model)
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


def test_overrides_may_come_before_and_after_the_options(runnable, tmp_path):
    assert main([*runnable[:3], "--dry-run", *runnable[3:]]) == 0
    assert load_config(tmp_path / "run" / "config.yaml") == load_config(overrides=runnable)


def test_hydra_plus_overrides_are_read_with_one_note(runnable, tmp_path, capsys):
    """verl users paste Hydra's `+key=`/`++key=`: a key megarl has is read as that key."""
    assert main(["--dry-run", *runnable, "++rollout.n=2", "+trainer.val_before_train=False"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert notes == ["note: read ++rollout.n, +trainer.val_before_train as megarl's rollout.n, "
                     "trainer.val_before_train (megarl needs no Hydra +/++)"]
    cfg = load_config(tmp_path / "run" / "config.yaml")
    assert (cfg.rollout.n, cfg.trainer.val_before_train) == (2, False)


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


def test_a_value_out_of_its_range_is_one_line_at_dry_run(runnable, capsys):
    assert main(["--dry-run", *runnable, "actor.optim.lr=-1"]) == 2
    assert capsys.readouterr().err == "error: actor.optim.lr=-1.0 must be > 0\n"


def test_dry_run_reads_every_prompt(runnable, tmp_path, capsys):
    empty = tmp_path / "empty_prompt.parquet"
    datasets.Dataset.from_list([{"data_source": "openai/gsm8k", "prompt": [], "reward_model": {"ground_truth": "1"}}]
                               ).to_parquet(str(empty))
    capsys.readouterr()
    assert main(["--dry-run", *runnable, f"data.val_files=[{empty}]"]) == 2
    assert capsys.readouterr().err.startswith(f"error: data.val_files: {empty} row 0: the prompt is an empty list")


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


def test_dry_run_reads_the_data_files_and_the_reward_function(runnable, tmp_path, capsys):
    no_prompt = tmp_path / "no_prompt.parquet"
    datasets.Dataset.from_list([{"data_source": "openai/gsm8k", "question": "q",
                                 "reward_model": {"ground_truth": "1"}}]).to_parquet(str(no_prompt))
    assert main(["--dry-run", *runnable, f"data.train_files=[{no_prompt}]"]) == 2
    assert "missing column(s) ['prompt']" in capsys.readouterr().err
    text = tmp_path / "notes.parquet"
    text.write_text("not parquet at all")
    assert main(["--dry-run", *runnable, f"data.val_files=[{text}]"]) == 2
    assert f"data.val_files: {text} is not a readable parquet file" in capsys.readouterr().err
    assert main(["--dry-run", *runnable, f"data.train_files=[{tmp_path}]"]) == 2
    assert f"data.train_files: {tmp_path} is a directory: list its parquet files ({tmp_path / 'no_prompt.parquet'}" \
        in capsys.readouterr().err
    rewards = tmp_path / "rewards.py"
    rewards.write_text("def score(**kwargs):\n    return 1.0\n")
    assert main(["--dry-run", *runnable, f"reward.function={rewards}:scor"]) == 2
    assert "has no function 'scor'; it defines: score" in capsys.readouterr().err
    rewards.write_text("import not_a_module\n")
    assert main(["--dry-run", *runnable, f"reward.function={rewards}:score"]) == 2
    assert "importing" in capsys.readouterr().err


def test_an_output_dir_that_cannot_be_written_is_one_line(runnable, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["--dry-run", *runnable, f"trainer.output_dir={blocker / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: trainer.output_dir={blocker / 'run'} cannot be written") and err.count("\n") == 1


def test_a_model_without_a_usable_tokenizer_is_one_line_at_dry_run(runnable, tmp_path, capsys):
    bare = model_config(tmp_path / "bare")
    assert main(["--dry-run", *runnable, f"model.path={bare}"]) == 2
    assert capsys.readouterr().err == (
        f"error: model.path={bare}: the tokenizer loaded from there is empty ('11+12=' encodes to no tokens): it has "
        "none of the tokenizer files tokenizer.json, tokenizer.model, vocab.json + merges.txt: copy them from the "
        "model's source, or point model.tokenizer_path at a directory that has them\n")
    small = model_config(tmp_path / "small", vocab_size=256)
    assert main(["--dry-run", *runnable, f"model.path={small}", f"model.tokenizer_path={tmp_path / 'model'}"]) == 2
    assert capsys.readouterr().err == (
        f"error: model.tokenizer_path={tmp_path / 'model'}: the tokenizer has 400 tokens, more than the model's "
        f"vocab_size=256 ({small}/config.json): token ids from 256 on have no embedding; use the model's own "
        "tokenizer\n")


def test_an_unsupported_architecture_is_one_line_at_dry_run(runnable, tmp_path, capsys):
    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    (gpt2 / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2, "vocab_size": 512}))
    make_tokenizer(gpt2)
    assert main(["--dry-run", *runnable, f"model.path={gpt2}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: model.path={gpt2}: model_type 'gpt2' ")


def test_checkpoints_that_will_not_fit_on_disk_are_a_warning_at_start(runnable, tmp_path, capsys):
    from megarl.models.shapes import SHAPES

    big = model_config(tmp_path / "qwen3_8b", **SHAPES["qwen3-8b"])  # 8.2B parameters: ~115 GB a checkpoint in bf16
    make_tokenizer(big)
    every_step = [*runnable, f"model.path={big}", "trainer.total_training_steps=400", "trainer.save_freq=1",
                  "trainer.memory_check=false"]
    assert main(["--dry-run", *every_step], gpu_gib=80.0) == 0
    warning = capsys.readouterr().err.splitlines()[-1]
    assert warning.startswith("warning: trainer.save_freq=1 saves 400 checkpoints of about 115 GB each (45.9 TB; "
                              "trainer.max_ckpt_to_keep unset keeps every one, as in verl), but ")
    assert "free: set trainer.max_ckpt_to_keep=" in warning or "not even one fits there" in warning
    assert main(["--dry-run", *runnable, "trainer.total_training_steps=400", "trainer.save_freq=1"]) == 0
    assert "warning" not in capsys.readouterr().err  # the tiny model's 400 checkpoints fit


def test_an_output_dir_another_run_holds_is_refused_in_one_line_naming_it(runnable, tmp_path, capsys):
    holder = RunLock(tmp_path / "run")  # as a run started before holds it
    assert main(["--dry-run", *runnable]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: trainer.output_dir={tmp_path / 'run'} is in use by another run (host "
                          f"{socket.gethostname()}, pid {os.getpid()}, since ") and err.count("\n") == 1
    assert not (tmp_path / "run" / "config.yaml").exists()  # the running run's config stays its own
    holder.release()
    assert main(["--dry-run", *runnable]) == 0
    assert not (tmp_path / "run" / LOCK_NAME).exists()  # released at the end


def test_the_launch_command_loads_no_model_or_engine_library(runnable):
    """`megarl train` checks a run before any worker starts, and `--dry-run` is that alone: the driver's start loads
    neither megatron, mbridge, SGLang nor Ray (megatron and mbridge cost ~10 s of imports), until a launch needs them."""
    code = ("import sys; from megarl.train import main; main(['--recipe', 'recipes/tiny_cpu_grpo.yaml', '--dry-run', "
            f"*{runnable!r}]); print(sorted(m for m in ('megatron', 'mbridge', 'sglang', 'ray') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == "[]", proc.stdout[-2000:]
