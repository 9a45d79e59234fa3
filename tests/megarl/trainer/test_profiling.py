"""`trainer.profile_steps`: a Chrome trace per worker process and the driver's phase timeline for each named step,
nothing for the others (megarl/trainer/profiling.py, parallel/profiler.py)."""

import json
import sys

import pytest

from megarl.config import ConfigError, load_config
from parallel.topology import free_port
from tests.helpers import overrides, run_command


def test_profiled_step_writes_a_trace_per_process_and_a_timeline(setup, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "-m", "megarl.train", *overrides(setup, out, "algorithm.adv_estimator=gae", "trainer.profile_steps=[2]")]
    proc = run_command(cmd, timeout=480)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    root = out / "profile"
    assert sorted(p.name for p in root.iterdir()) == ["step_2"]
    assert sorted(p.name for p in (root / "step_2").iterdir()) == ["rank_00000.json", "rank_00001.json",
                                                                   "timeline.json"]
    for rank in (0, 1):
        events = json.loads((root / f"step_2/rank_0000{rank}.json").read_text())["traceEvents"]
        ranges = {e.get("name") for e in events}
        # Every role call of the step is a named range in the trace of each process (the critic is colocated).
        assert {"rollout.generate", "actor.compute_log_prob", "critic.compute_values", "critic.update_critic",
                "actor.update_actor", "rollout.sync_weights"} <= ranges, rank
        assert any(e.get("name", "").startswith("aten::") for e in events)  # and the ops inside them
    phases = json.loads((root / "step_2/timeline.json").read_text())["traceEvents"]
    names = [e["name"] for e in phases]
    assert names[:2] == ["gen", "reward"] and {"old_log_prob", "values", "update_critic", "update_actor",
                                               "update_weights"} <= set(names)
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in phases)
    assert [e["ts"] for e in phases] == sorted(e["ts"] for e in phases)


def test_profile_steps_must_be_step_numbers():
    with pytest.raises(ConfigError) as info:
        load_config(overrides=["trainer.profile_steps=[0]"])
    assert info.value.problems == ["trainer.profile_steps[0]=0 must be at least 1"]


def test_profile_tool_must_be_one_megarl_has():
    with pytest.raises(ConfigError) as info:
        load_config(overrides=["trainer.profile_tool=nsys"])
    assert info.value.problems == ["trainer.profile_tool='nsys' is not one of: torch, torch_memory."]


def test_the_memory_tool_replaces_the_trace(setup, tmp_path):
    """`trainer.profile_tool=torch_memory` records the GPU allocator instead of a Chrome trace: on CPU, where there
    is no allocator to record, the profiled step writes only the driver's timeline (tests/gpu/test_profiler_gpu.py
    reads a snapshot)."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "-m", "megarl.train", *overrides(setup, out, "trainer.profile_steps=[2]", "trainer.total_training_steps=2",
                                            "trainer.profile_tool=torch_memory")]
    proc = run_command(cmd, timeout=480)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    assert sorted(p.name for p in (out / "profile/step_2").iterdir()) == ["timeline.json"]
