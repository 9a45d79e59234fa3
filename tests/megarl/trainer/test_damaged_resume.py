"""A damaged checkpoint end to end on CPU (torchrun, 2 processes, the tiny model of conftest.py's `setup`, GRPO): a
run saves steps 1 and 2, then in a copy step 2's first model shard is cut in half. `trainer.resume_mode=auto` skips
step 2 with one warning naming the file, resumes from step 1 to the step-2 metrics of the whole run, and leaves step
2 in place; asked for step 2 by path, the run stops before any worker starts with a one-line error naming the file,
and so it does for a step 2 whose trainer_state.json changed. Without its manifest (as a checkpoint saved before
manifests), the cut shard fails inside the workers with an error naming the checkpoint directory. Resuming at another
tensor-parallel size is refused before any worker starts."""

import shutil
import subprocess
import sys

from parallel.topology import free_port
from tests.helpers import WALL_CLOCK, ENV, REPO_ROOT, overrides, read_metrics

RUN = ["algorithm.adv_estimator=grpo", "trainer.total_training_steps=2"]
NOT_COMPARED = WALL_CLOCK


def train(setup, out, log, *extra, torchrun=True):
    """`megarl train` on the tiny setup; returns its exit code and console."""
    launcher = ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port())]
    cmd = [sys.executable, *(launcher if torchrun else []), "-m", "megarl.train", *overrides(setup, out, *RUN, *extra)]
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=ENV, stdout=f, stderr=subprocess.STDOUT, timeout=600)
    return proc.returncode, log.read_text()


def step_metrics(out, step):
    metrics = next(m for m in read_metrics(out) if m["step"] == step)
    return {key: value for key, value in metrics.items() if not key.startswith(NOT_COMPARED)}


def test_auto_resume_skips_a_damaged_checkpoint_and_a_resume_path_names_it(setup, tmp_path):
    # A score that differs between responses, so that step 1 updates the policy and step 2's metrics depend on it.
    reward = tmp_path / "length_reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return len(solution_str) % 7 / 7\n")
    score = f"reward.function={reward}:compute_score"
    whole = tmp_path / "whole"
    code, log = train(setup, whole, tmp_path / "whole.log", "trainer.save_freq=1", score)
    assert code == 0, log[-6000:]
    code, log = train(setup, whole, tmp_path / "again.log", "trainer.save_freq=1", score)  # finished: says so
    assert code == 0 and log.count(f"{whole} is already at step 2 of 2: nothing to train") == 1, log[-3000:]
    damaged = tmp_path / "damaged"
    shutil.copytree(whole, damaged)
    step1, step2 = damaged / "checkpoints" / "global_step_1", damaged / "checkpoints" / "global_step_2"
    shard = step2 / "actor" / "model" / "__0_0.distcp"
    full = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[: full // 2])
    cut = f"actor/model/__0_0.distcp has {full // 2} bytes, the manifest says {full}"

    by_path = [score, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={step2}"]
    code, log = train(setup, damaged, tmp_path / "by_path.log", *by_path, torchrun=False)
    assert code == 2
    assert log.rstrip().splitlines()[-1].startswith(f"error: trainer.resume_from_path={step2} is damaged: {cut}. ")
    assert "global_step_1" in log.rstrip().splitlines()[-1]
    changed = tmp_path / "changed" / "global_step_2"
    shutil.copytree(whole / "checkpoints" / "global_step_2", changed)
    state = changed / "trainer_state.json"
    state.write_text(state.read_text().replace('"step": 2', '"step": 3'))
    code, log = train(setup, damaged, tmp_path / "changed.log", score, "trainer.resume_mode=resume_path",
                      f"trainer.resume_from_path={changed}", torchrun=False)
    assert code == 2
    assert log.rstrip().splitlines()[-1].startswith(
        f"error: trainer.resume_from_path={changed} is damaged: trainer_state.json fails its CRC-32 check")

    code, log = train(setup, damaged, tmp_path / "auto.log", score)  # no saves: step 2 must stay as it is
    assert code == 0, log[-6000:]
    warnings = [line for line in log.splitlines() if line.startswith("warning: skipping damaged checkpoint")]
    assert len(warnings) == 1, warnings  # once: rank 0 speaks for the run
    assert warnings[0].startswith(f"warning: skipping damaged checkpoint {step2}: {cut}; ")
    assert f"resumed from {step1} (step 1)" in log
    assert step_metrics(damaged, 2) == step_metrics(whole, 2)
    assert shard.stat().st_size == full // 2 and (step2 / "trainer_state.json").is_file()

    (step2 / "manifest.json").unlink()  # as saved before manifests: nothing to verify, so the workers meet the cut
    # One more step to train, so the run loads step 2 instead of saying it is finished.
    code, log = train(setup, damaged, tmp_path / "unverified.log", score, "trainer.total_training_steps=3")
    assert code == 1
    assert f"{step2} has no manifest.json" in log
    assert f"CheckpointError: {step2 / 'actor' / 'model'} cannot be read (EOFError on rank " in log

    # At another tensor-parallel size the saved optimizer state (megatron's dp_reshardable format) cannot load: refused
    # before any worker starts, with one line.
    code, log = train(setup, whole, tmp_path / "tp2.log", score, "trainer.total_training_steps=3",
                      "actor.megatron.tensor_model_parallel_size=2", torchrun=False)
    assert code == 2, log[-3000:]
    assert log.rstrip().splitlines()[-1].startswith(
        f"error: checkpoint {whole / 'checkpoints' / 'global_step_2'} cannot resume at "
        "actor.megatron.tensor_model_parallel_size=2: its actor was saved at 1, ")
