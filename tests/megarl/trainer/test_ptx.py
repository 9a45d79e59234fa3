"""PPO-ptx end to end on CPU (torchrun, 2 processes, the tiny setup of conftest.py): RL with a high learning rate
moves the policy away from plain pretraining text (its NLL, `actor/ptx_loss`, rises over the steps); with a large
`actor.ptx_coef` the NLL never rises above its start. With `actor.ptx_coef=0` (the default) the update packs no
pretraining micro-batch: the plain PPO code path, and `data.ptx_files` is refused as unused."""

import sys

import datasets
import pytest

from parallel.topology import free_port
from tests.helpers import overrides, read_metrics, run_command

TEXTS = ["the cat sat on the mat", "one plus two is three", "a tiny model learns", "numbers add up to more",
         "what is four and five", "the answer is nine"]


@pytest.fixture(scope="module")
def ptx_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("ptx")
    datasets.Dataset.from_list([{"text": t} for t in TEXTS]).to_parquet(str(root / "text.parquet"))
    return root


@pytest.fixture(scope="module")
def length_reward(tmp_path_factory):
    """A score that differs between responses, so that every step moves the policy."""
    path = tmp_path_factory.mktemp("reward") / "length_reward.py"
    path.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                    "    return len(solution_str) % 7 / 7\n")
    return f"reward.function={path}:compute_score"


def ptx_losses(setup, out, ptx_files, length_reward, coef):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "-m", "megarl.train",
           *overrides(setup, out, "algorithm.adv_estimator=grpo", "trainer.total_training_steps=6", "actor.optim.lr=3e-2",
                      "actor.ppo_mini_batch_size=2", length_reward, f"data.ptx_files=[{ptx_files / 'text.parquet'}]",
                      "data.ptx_prompt_key=null", "data.ptx_response_key=text", f"actor.ptx_coef={coef}")]
    proc = run_command(cmd, timeout=480)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    return [step["actor/ptx_loss"] for step in read_metrics(out)]


def test_a_large_ptx_coefficient_holds_the_pretraining_loss(setup, tmp_path, ptx_files, length_reward):
    drifting = ptx_losses(setup, tmp_path / "small", ptx_files, length_reward, 1e-9)
    held = ptx_losses(setup, tmp_path / "large", ptx_files, length_reward, 10.0)
    assert drifting[0] == pytest.approx(held[0], rel=1e-4)  # the same model, the same first pretraining batch
    assert drifting[-1] > drifting[0], drifting  # RL alone moves the policy off the text (6.21 -> 6.46 here)
    assert max(held[1:]) <= held[0] and held[-1] < drifting[-1] - 1.0, held  # the LM loss holds it (-> 3.29)
