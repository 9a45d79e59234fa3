"""Checkpoints and resume end to end on CPU (torchrun, 2 processes, the tiny model of conftest.py's `setup`): a run
killed (SIGKILL of every process) once its step-2 checkpoint is committed, then started again with
trainer.resume_mode=auto, logs exactly the step-3 metrics of an uninterrupted run. GRPO with a KL loss at TP=2,
DAPO's dynamic sampling (which draws a step's prompts in rounds) and overlong shaping; PPO with a critic, an
adaptive KL controller and DP=2, resumed past a checkpoint left half-written (`global_step_3.partial`) and a corrupt
tracker file. Both add PPO-ptx, whose pretraining loader resumes too. A checkpoint's actor directory exports to HF (bit-exactness
of that export is tests/megarl/models/test_checkpoint.py's). Neither the resume nor the export shows library
warnings."""

import json
import os
import signal
import subprocess
import sys
import time

import datasets
import psutil
import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from parallel.topology import free_port
from tests.helpers import ENV, WALL_CLOCK, UNFORKED_ENV, REPO_ROOT, overrides, read_metrics

CASES = {
    "grpo": ["algorithm.adv_estimator=grpo", "actor.use_kl_loss=true", "actor.megatron.tensor_model_parallel_size=2",
             "actor.ppo_mini_batch_size=2", "algorithm.filter_groups.enable=true",
             "algorithm.filter_groups.max_num_gen_batches=3", "reward.overlong_buffer.enable=true",
             "reward.overlong_buffer.len=2"],
    "ppo": ["algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.target_kl=0.01",
            "algorithm.kl_ctrl.horizon=10"],
}
# A warmup makes the learning rate depend on the restored scheduler; one checkpoint kept exercises pruning.
RUN = ["trainer.total_training_steps=3", "trainer.save_freq=2", "trainer.max_ckpt_to_keep=1",
       "actor.optim.lr_warmup_steps=4", "critic.optim.lr_warmup_steps=4"]
NOT_COMPARED = WALL_CLOCK


@pytest.fixture(scope="module")
def reward(tmp_path_factory):
    """A score that differs between responses, so that every step has advantages and updates the policy (the tiny
    random model never answers the sums right); and PPO-ptx's pretraining text, whose loader resumes too."""
    root = tmp_path_factory.mktemp("reward")
    (root / "length_reward.py").write_text("def compute_score(data_source, solution_str, ground_truth, "
                                           "extra_info=None):\n    return len(solution_str) % 7 / 7\n")
    texts = [f"text number {i} of the pretraining set" for i in range(10)]
    datasets.Dataset.from_list([{"text": t} for t in texts]).to_parquet(str(root / "text.parquet"))
    return [f"reward.function={root / 'length_reward.py'}:compute_score", f"data.ptx_files=[{root / 'text.parquet'}]",
            "data.ptx_prompt_key=null", "data.ptx_response_key=text", "actor.ptx_coef=0.5"]


def command(root, out, case, reward):
    # A port of its own: a run started right after a killed one, or beside other tests, must not meet theirs.
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
            "-m", "megarl.train", *overrides(root, out, *CASES[case], *RUN, *reward)]


def run(cmd, log):
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=ENV, stdout=f, stderr=subprocess.STDOUT, timeout=600)
    assert proc.returncode == 0, log.read_text()[-6000:]
    return log.read_text()


def kill_everything(proc: subprocess.Popen) -> None:
    """SIGKILL the launcher and every process under it, each in its process group (torchrun starts every rank in a
    session of its own, and a rank's helpers join its group)."""
    processes = [psutil.Process(proc.pid)]
    processes += processes[0].children(recursive=True)
    groups = set()
    for process in processes:
        try:
            groups.add(os.getpgid(process.pid))
        except ProcessLookupError:
            pass
    for group in groups - {os.getpgrp()}:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=60)


def run_until_checkpoint(cmd, log, checkpoint, timeout=600):
    """Start the run and kill it as soon as `checkpoint` is committed."""
    # Unforked (tests/zygote): the subject is a SIGKILL of every process of the run, which must own them all.
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=UNFORKED_ENV, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while not (checkpoint / "trainer_state.json").is_file():
            assert proc.poll() is None, f"the run ended before {checkpoint} was saved:\n{log.read_text()[-6000:]}"
            assert time.monotonic() < deadline, f"no {checkpoint} after {timeout} s:\n{log.read_text()[-6000:]}"
            time.sleep(0.02)
    finally:
        kill_everything(proc)
    return proc.returncode


def export(checkpoint, hf):
    proc = subprocess.run([sys.executable, "-m", "megarl.cli", "export", "--checkpoint", str(checkpoint), "--out",
                           str(hf)], cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "FutureWarning" not in proc.stderr, proc.stderr[-4000:]  # megatron's loading calls deprecated torch APIs
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(hf)


def assert_same_checkpoint(expected, got, scratch):
    """Everything saved after step 3: weights, optimizer state (Adam's moments and step count: the step-3 metrics
    come before step 3's update), LR scheduler, RNG states, loader and KL controller."""
    assert json.loads((got / "trainer_state.json").read_text()) == json.loads((expected / "trainer_state.json").read_text())
    for role in (p.name for p in expected.iterdir() if p.is_dir()):
        for part in ("model", "optimizer"):
            loaded = []
            for run in (expected, got):
                dcp_to_torch_save(run / role / part, scratch / "state.pt")
                loaded.append(torch.load(scratch / "state.pt", weights_only=False))
                loaded[-1]["common"] = torch.load(run / role / part / "common.pt", weights_only=False)
            assert loaded[0].keys() == loaded[1].keys()
            for key, value in loaded[0].items():
                same = torch.equal(value, loaded[1][key]) if torch.is_tensor(value) else value == loaded[1][key]
                assert same, f"{role}/{part}: {key}"
        for rank_file in (expected / role / "rng").iterdir():
            assert (got / role / "rng" / rank_file.name).read_text() == rank_file.read_text()


def compared(metrics: dict) -> dict:
    return {key: value for key, value in metrics.items() if not key.startswith(NOT_COMPARED)}


def step_metrics(out, step):
    return compared(next(m for m in read_metrics(out) if m["step"] == step))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_killed_run_resumes_to_the_same_metrics(setup, reward, tmp_path, case):  # noqa: F811
    whole, interrupted = tmp_path / "whole", tmp_path / "interrupted"
    run(command(setup, whole, case, reward), tmp_path / "whole.log")
    checkpoints = whole / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["global_step_3", "latest_checkpointed_iteration.txt"]
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text() == "3"
    if case == "grpo":
        export(checkpoints / "global_step_3" / "actor", tmp_path / "hf")

    saved = interrupted / "checkpoints"
    returncode = run_until_checkpoint(command(setup, interrupted, case, reward), tmp_path / "killed.log",
                                      saved / "global_step_2")
    assert returncode == -signal.SIGKILL
    assert not (saved / "global_step_3" / "trainer_state.json").exists()
    if case == "ppo":  # a save of step 3 that died half-way, and a tracker file cut short
        (saved / "global_step_3.partial" / "actor" / "model").mkdir(parents=True)
        (saved / "global_step_3.partial" / "actor" / "role.json").write_text('{"role": "ac')
        (saved / "latest_checkpointed_iteration.txt").write_text("")

    log = run(command(setup, interrupted, case, reward), tmp_path / "resumed.log")
    assert f"resumed from {saved / 'global_step_2'} (step 2)" in log
    # The killed run's rank 0 held the output directory: the kernel released its lock, its lock file says whose it was
    assert f"note: taking trainer.output_dir={interrupted} over from a run that ended without releasing it" in log
    assert "FutureWarning" not in log, log[-6000:]
    expected = step_metrics(whole, 3)
    assert expected["actor/grad_norm"] > 1e-3  # the policy really moves: equal metrics would prove little otherwise
    assert step_metrics(interrupted, 3) == expected
    assert [m["step"] for m in read_metrics(interrupted)] == [1, 2, 3]  # no line of the killed run's step 3
    assert_same_checkpoint(whole / "checkpoints" / "global_step_3", saved / "global_step_3", tmp_path)
    assert sorted(p.name for p in saved.iterdir()) == ["global_step_3", "latest_checkpointed_iteration.txt"]
    assert (saved / "latest_checkpointed_iteration.txt").read_text() == "3"
    state = json.loads((saved / "global_step_3" / "trainer_state.json").read_text())
    whole_state = json.loads((whole / "checkpoints" / "global_step_3" / "trainer_state.json").read_text())
    assert state["step"] == 3 and state["loader"] == whole_state["loader"]
    if case == "ppo":  # one loader batch a step; dynamic sampling (grpo) may draw more
        assert state["loader"] == {"epoch": 1, "batch_in_epoch": 1, "seed": 1}
    if case == "ppo":
        assert state["kl_controller"]["value"] != 0.001  # the adaptive coefficient moved, and was carried over

