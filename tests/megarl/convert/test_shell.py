import pytest

from megarl.convert.shell import ScriptError, read_script


def overrides(script: str, *args: str, **env: str) -> list[str]:
    return read_script(script, args, env).overrides


def test_continuations_comments_quotes_and_variables():
    script = """#!/bin/bash
set -x
# the data
data_dir=$HOME/data   # a comment after a command
export ROLLOUT=vllm
train_files="['$data_dir/a.parquet', '$data_dir/b.parquet']"
python3 -m verl.trainer.main_ppo \\
    data.train_files="$train_files" \\
    trainer.logger='["console","wandb"]' \\
    trainer.project_name='$literal' \\
    actor_rollout_ref.rollout.name=${ROLLOUT} \\
    trainer.experiment_name="run \\"one\\"" \\
    data.val_files=\\$escaped
"""
    assert overrides(script, HOME="/h") == [
        "data.train_files=['/h/data/a.parquet', '/h/data/b.parquet']",
        'trainer.logger=["console","wandb"]',
        "trainer.project_name=$literal",
        "actor_rollout_ref.rollout.name=vllm",
        'trainer.experiment_name=run "one"',
        "data.val_files=$escaped",
    ]


def test_defaults_arithmetic_and_the_scripts_own_arguments():
    script = """
MODEL=${MODEL_PATH:-/data/default}
DATA=${DATA_HOME:-"${HOME}/verl"}/data
: ${NGPUS:=4}
max_prompt_length=$((1024 * 2))
HYDRA_FULL_ERROR=1 python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=$MODEL data.train_files="$DATA" \\
    data.max_prompt_length=$max_prompt_length data.max_response_length=$(( max_prompt_length / 4 + 1 )) \\
    trainer.n_gpus_per_node=${NGPUS} trainer.nnodes=${NNODES:-1} "$@"
"""
    assert overrides(script, "trainer.total_epochs=3", "data.seed=7", HOME="/h") == [
        "actor_rollout_ref.model.path=/data/default", "data.train_files=/h/verl/data", "data.max_prompt_length=2048", "data.max_response_length=513",
        "trainer.n_gpus_per_node=4", "trainer.nnodes=1", "trainer.total_epochs=3", "data.seed=7"]
    assert overrides(script, MODEL_PATH="/m")[0] == "actor_rollout_ref.model.path=/m"


def test_unquoted_expansions_split_into_words_and_the_command_ends_at_a_pipe():
    script = """
COMMON="algorithm.adv_estimator=grpo data.train_batch_size=8"
python3 -m verl.trainer.main_ppo $COMMON trainer.nnodes=1 $@ 2>&1 | tee log.txt; echo done
"""
    assert overrides(script) == ["algorithm.adv_estimator=grpo", "data.train_batch_size=8", "trainer.nnodes=1"]
    assert overrides(script, "a.b=1", "c.d=2")[-2:] == ["a.b=1", "c.d=2"]


def test_config_name_and_module():
    command = read_script("python3 -m verl.trainer.main_ppo --config-path=config \\\n"
                          "  --config-name='ppo_megatron_trainer.yaml'\\\n  algorithm.adv_estimator=gae")
    assert (command.module, command.config_name, command.overrides) == (
        "verl.trainer.main_ppo", "ppo_megatron_trainer", ["algorithm.adv_estimator=gae"])
    command = read_script("python -m verl.trainer.main_ppo_megatron -cn my_config +trainer.val_before_train=False")
    assert (command.module, command.config_name, command.overrides) == (
        "verl.trainer.main_ppo_megatron", "my_config", ["+trainer.val_before_train=False"])


def test_shift_and_torchruns_size():
    script = """
nproc_per_node=$1
save_path=$2
shift 2
torchrun --standalone --nnodes=1 --nproc_per_node=$nproc_per_node -m verl.trainer.fsdp_sft_trainer \\
    trainer.default_local_dir=$save_path $@
"""
    command = read_script(script, ["4", "/ckpt", "optim.lr=1e-4"])
    assert command.module == "verl.trainer.fsdp_sft_trainer"
    assert command.overrides == ["trainer.default_local_dir=/ckpt", "optim.lr=1e-4", "trainer.nnodes=1",
                                 "trainer.n_gpus_per_node=4"]  # torchrun's, after the script's own: theirs win
    assert "the run's size is torchrun's: trainer.nnodes=1, trainer.n_gpus_per_node=4" in command.notes
    assert read_script("shift\npython3 -m verl.trainer.main_ppo $@", ["x", "a.b=1"]).overrides == ["a.b=1"]


def test_what_is_not_evaluated_is_noted():
    script = """
if [ "$MODE" = "async" ]; then
    return_raw_chat=True
fi
python3 -m verl.trainer.main_ppo trainer.experiment_name=run_$(date +%s) data.return_raw_chat=$return_raw_chat \\
    trainer.default_local_dir=$CKPT_DIR --multirun
"""
    command = read_script(script)
    assert command.overrides == ["trainer.experiment_name=run_$(date +%s)", "data.return_raw_chat=True",
                                 "trainer.default_local_dir="]
    assert command.notes == [
        "`if ...` is not evaluated: the assignments inside apply in order",
        "'$(date +%s)' is not run: it stays as written",
        "$CKPT_DIR is set neither in the script nor in the environment: empty, as bash leaves it",
        "ignored '--multirun' on the verl command line (not a key=value override)",
    ]


def test_a_text_of_bare_overrides_is_read_as_overrides():
    assert overrides("algorithm.adv_estimator=grpo \\\n  actor_rollout_ref.rollout.n=$N\n", N="8") == [
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=8"]


@pytest.mark.parametrize("script, message", [
    ("set -x\necho hello\n", "found no `python3 -m verl.trainer.main_ppo ...` command"),
    ("python3 -m verl.trainer.main_ppo trainer.project_name='open", "a ' opened at"),
    ("python3 -m verl.trainer.main_ppo trainer.project_name=${NAME", "is never closed"),
])
def test_unreadable_scripts_say_why(script, message):
    with pytest.raises(ScriptError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        read_script(script)
