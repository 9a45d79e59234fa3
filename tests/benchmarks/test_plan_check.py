"""benchmarks/plan_check.py and plan_rows.py against the committed memory rows: every recorded rl_memory.py command
still rebuilds its run's config, each measured phase is set beside the planner's own figure for that config, the
largest micro-batches it rebuilds from the data respect the run's token budgets and, planned at, lower the worst case,
and the phases a later commit changed are named with it and left out of the verdict."""

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT, SHARED_DATA

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from plan_check import GPU_GIB, compare, largest_micro_batches, measured_rows, run_config, summary  # noqa: E402
from superseded import CHANGES, EVERY_PHASE, superseded  # noqa: E402

from megarl.plan.calibration import GIB  # noqa: E402
from megarl.plan.inputs import plan_inputs  # noqa: E402
from megarl.plan.phases import plan_memory  # noqa: E402

RESULTS = sorted((REPO_ROOT / "benchmarks/results").glob("*-memory.json"))
ROWS = list(measured_rows(RESULTS))


def test_there_are_memory_rows_to_check():
    assert len(ROWS) >= 5


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['label']}@{r['commit'].split()[0]}" for r in ROWS])
def test_each_measured_phase_meets_the_planners_figure_for_the_runs_config(row):
    cfg, args = run_config(row)
    gpu_gib = args.gpu_cap_gib or GPU_GIB[row["machine"]]
    planned = {p.name: p.total / GIB for p in plan_memory(plan_inputs(cfg, gpu_gib, 1000.0, args.shape,
                                                                      args.layers)[0]).phases}
    lines, _ = compare(row)
    measured = {key.split("/")[1]: gb * 1e9 / GIB for key, gb in row["memory_gb"].items()
                if key.endswith("/peak_gb") and key.split("/")[1] in planned and gb}
    assert measured and len(lines) == 1 + len(measured)
    for line in lines[1:]:
        name, _, plan, _, seen, error = line.split()[:6]
        assert float(plan) == pytest.approx(planned[name], abs=0.006)
        assert float(seen) == pytest.approx(measured[name], abs=0.006)
        assert float(error.rstrip("%")) == pytest.approx(100 * (planned[name] / measured[name] - 1), abs=0.15)


@pytest.mark.skipif(not (SHARED_DATA / "gsm8k").exists(), reason="needs ../shared/data/gsm8k")
def test_the_rebuilt_micro_batches_stay_within_the_token_budget(tmp_path):
    row = next(r for r in ROWS if r["label"] == "0.5b-ppo")
    cfg, _ = run_config(row)
    largest = largest_micro_batches(row, SHARED_DATA / "gsm8k", tmp_path)
    assert 0 < largest["update_actor"] <= cfg.actor.ppo_max_token_len_per_gpu
    assert 0 < largest["old_log_prob"] <= cfg.actor.log_prob_max_token_len_per_gpu
    assert 0 < largest["update_critic"] <= cfg.critic.ppo_max_token_len_per_gpu
    _, plan = compare(row, largest)  # its critic's largest micro-batch is below the plan's worst case
    critic = plan["phases"]["update_critic"]
    assert critic["predicted_at_run_micro_batch_gib"] < critic["predicted_gib"]
    assert plan["run_micro_batch_tokens"] == largest


def test_label_and_commit_pick_the_runs_written_out(tmp_path, monkeypatch):
    import plan_check

    row = ROWS[-1]
    commit = row["commit"].split()[0]
    out = tmp_path / "plan.json"
    monkeypatch.setattr(sys, "argv", ["plan_check.py", "--label", row["label"], "--commit", commit,
                                      "--out", str(out), *map(str, RESULTS)])
    assert plan_check.main() == 0
    written = json.loads(out.read_text())
    same = [r for r in ROWS if r["label"] == row["label"] and r["commit"] == row["commit"]]
    assert len(written) == len(same) >= 1
    assert {w["measured_row"] for w in written} == {row["label"]} and {w["commit"] for w in written} == {row["commit"]}
    monkeypatch.setattr(sys, "argv", ["plan_check.py", "--commit", f"{commit}-none", "--out", str(out),
                                      *map(str, RESULTS)])
    assert plan_check.main() == 0
    assert len(json.loads(out.read_text())) == len(written)  # nothing appended


def test_every_change_that_supersedes_rows_is_in_this_history():
    for change in CHANGES:  # else every row would read as measured before it
        found = subprocess.run(["git", "cat-file", "-e", f"{change.commit}^{{commit}}"], cwd=REPO_ROOT)
        assert found.returncode == 0, change.commit


def row(label: str, commit: str) -> dict:
    return next(r for r in ROWS if r["label"] == label and r["commit"].startswith(commit))


@pytest.mark.parametrize("label, commit, expected", [
    ("3.6b-no-offload", "ab68815", {}),  # today's behaviour in every phase
    ("3.6b-no-offload", "3c047c9", {"sync": ["63a8172"]}),  # its sync's last sample came before the KV cache's return
    ("0.5b-ppo", "3421a59", {"values": ["9721eb3"]}),  # the resident reference's cache, handed back since
    ("8b-18l-tp2-24gb", "31d96d7", {"ref": ["3c047c9"], "update_actor": ["3c047c9"], "sync": ["63a8172"]}),
])
def test_a_phase_is_superseded_by_the_commits_that_changed_it_for_the_runs_config(label, commit, expected):
    measured = row(label, commit)
    assert superseded(measured, run_config(measured)[0], REPO_ROOT) == expected


def test_a_row_of_a_commit_before_this_history_is_superseded_in_every_phase():
    measured = row("3.6b-no-offload", "dfb0091")  # squashed into 9d20069
    gone = superseded(measured, run_config(measured)[0], REPO_ROOT)
    assert set(gone) == set(EVERY_PHASE)
    assert "89ba561" in gone["gen"]


def test_the_verdict_leaves_superseded_phases_out():
    phases = {"gen": {"error": 0.01}, "sync": {"error": 0.35}, "update_actor": {"error": -0.06}}
    current = {"measured_row": "a", "commit": "abc1234", "machine": "m", "phases": phases,
               "superseded": {"sync": ["63a8172"]}}
    outside = {**current, "measured_row": "b", "superseded": {}}
    gone = {**current, "measured_row": "c", "superseded": {name: ["89ba561"] for name in phases}}
    lines = summary([current, outside, gone])[2:]
    assert "update_actor -6.0%" in lines[0] and "within ±10 %; superseded: sync" in lines[0]
    assert "sync +35.0%" in lines[1] and "OUTSIDE ±10 %" in lines[1]
    assert "superseded in every phase, by 89ba561" in lines[2]
