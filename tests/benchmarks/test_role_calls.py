"""benchmarks/role_calls.py: a PPO recipe's training-side role calls timed round after round, on CPU with the tiny
recipe (its layers run eagerly there either way)."""

import json
import sys

from tests.helpers import ENV, REPO_ROOT, run_command


def test_role_calls_get_medians_after_the_warm_up_an_ab_set_of_their_own_and_a_profiled_round(tmp_path):
    out = tmp_path / "row.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1",
           str(REPO_ROOT / "benchmarks/role_calls.py"), "--recipe", str(REPO_ROOT / "recipes/tiny_cpu_ppo.yaml"),
           "--shape", "tiny", "--rounds", "3", "--eager-layers", "--set", "trainer.n_gpus_per_node=1",
           "--profile", str(tmp_path / "trace"), "--versus", "critic.ppo_max_token_len_per_gpu=64",
           "--out", str(out)]
    proc = run_command(cmd, timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    [row] = json.loads(out.read_text())
    calls = ("old_log_prob", "ref", "values", "update_actor", "update_critic")
    assert row["what"] == "role-calls" and row["layers"] == "eager"
    assert all(len(row["call_s"][name]) == 3 for name in calls)
    assert all(row["call_s_median"][name] == sorted(row["call_s"][name])[1] for name in calls)
    versus = row["versus"]
    assert versus["overrides"] == ["critic.ppo_max_token_len_per_gpu=64"]
    assert all(len(versus["call_s"][name]) == 3 and versus["call_s"][name] != row["call_s"][name] for name in calls)
    trace = json.loads((tmp_path / "trace/rank_00000.json").read_text())["traceEvents"]
    ranges = {e["name"] for e in trace if e.get("cat") == "user_annotation"}
    assert {"actor.update_actor", "critic.update_critic", "ref.compute_ref_log_prob"} <= ranges, sorted(ranges)
