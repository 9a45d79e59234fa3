"""The reward-model role scores a prompt + response at its last token as HF's sequence-classification model does,
at TP 1 and 2, its weights leaving the GPU after each pass unless it is resident (a pool of its own); a checkpoint
without a one-label `score.weight` is refused."""

import json
import sys

import pytest

from parallel.topology import free_port
from tests.helpers import REPO_ROOT, make_reward_model, run_command

JOB = REPO_ROOT / "tests" / "megarl" / "workers" / "reward_model_job.py"


@pytest.fixture(scope="module")
def reward_model(tmp_path_factory):
    return make_reward_model(tmp_path_factory.mktemp("rm") / "rm")


@pytest.mark.parametrize("tp", [1, 2])
def test_scores_equal_hf_sequence_classification(reward_model, tmp_path, tp):
    out = tmp_path / "scores.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(tp), "--master-port",
           str(free_port()), str(JOB), str(reward_model), str(out), "--tp", str(tp)]
    proc = run_command(cmd, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["max_abs_diff"] < 1e-4 and result["resident_max_abs_diff"] < 1e-4
    assert result["params_on_device"] == {"colocated": False, "resident": True}
    assert len(set(round(s, 4) for s in result["scores"])) == 4  # a real score per sequence, not a constant


def test_a_policy_checkpoint_is_not_a_reward_model(tmp_path):
    from megarl.config.schema import MegatronConfig
    from megarl.models.roles import build_reward_model
    from tests.helpers import make_chat_model

    policy = make_chat_model(tmp_path / "policy")
    with pytest.raises(ValueError, match="is not a reward model: it needs a score.weight of one label"):
        build_reward_model(policy, MegatronConfig())
