"""A rollout engine that dies mid-run, end to end on CPU (the tiny setup of conftest.py, GRPO, two steps): the
transformers engine, loaded as user code through `rollout.name=file.py:Class`, raises EngineDied as SGLangEngine does
when its scheduler dies. Under torchrun (two ranks, each the owner of an engine) both die in step 2's generation:
the engine is built again, the actor's trained weights are streamed into it (the engine/trainer log-prob gate at
1.001 fails the step on the model's original weights) and the generation runs again, so the run ends with step 2's
metrics equal to an undisturbed run's and `rollout/engine_restarts` 1. Under Ray an engine that dies again right
after the restart stops the run with one line naming the cause."""

import subprocess
import sys

import pytest

from megarl.rollout.base import EngineFailure
from megarl.trainer.recovery import RecoveringRollout
from parallel.batch import Batch
from parallel.controller import Pending, WorkerError
from parallel.topology import free_port
from tests.helpers import ENV, REPO_ROOT, WALL_CLOCK, overrides, read_metrics

ENGINE = '''
from pathlib import Path

import torch.distributed as dist

from megarl.rollout.base import EngineDied
from megarl.rollout.transformers_engine import TransformersEngine

DIES_AT = {dies_at!r}


class DyingEngine(TransformersEngine):
    def generate(self, prompts, params):
        # This engine's generate calls, counted on disk: a restarted engine is a newly loaded module.
        counter = Path({calls!r} + f".{{dist.get_rank()}}")
        calls = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(calls))
        if calls in DIES_AT:
            raise EngineDied(f"test: the engine dies at generate call {{calls}}")
        return super().generate(prompts, params)
'''


def dying_engine(tmp_path, dies_at: tuple[int, ...]) -> str:
    engine = tmp_path / "dying_engine.py"
    engine.write_text(ENGINE.format(calls=str(tmp_path / "calls"), dies_at=dies_at))
    return f"rollout.name={engine}:DyingEngine"


def train(setup, out, *extra, torchrun: bool) -> subprocess.CompletedProcess:
    launcher = ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port())]
    cmd = [sys.executable, *(launcher if torchrun else []), "-m", "megarl.train",
           *overrides(setup, out, "algorithm.adv_estimator=grpo", *extra)]
    return subprocess.run(cmd, cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=600)


def compared(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.startswith(WALL_CLOCK) and k != "rollout/engine_restarts"}


def test_an_engine_that_dies_is_restarted_with_the_trained_weights(setup, tmp_path):
    whole = train(setup, tmp_path / "whole", torchrun=True)
    assert whole.returncode == 0, whole.stderr[-5000:]
    run = train(setup, tmp_path / "dies", dying_engine(tmp_path, dies_at=(2,)), torchrun=True)
    assert run.returncode == 0, run.stderr[-5000:]
    console = run.stdout + run.stderr
    assert console.count("rollout engine died during generate on rank 0 (test: the engine dies at generate call 2); "
                         "restarting it") == 1, console[-3000:]
    expected, got = read_metrics(tmp_path / "whole"), read_metrics(tmp_path / "dies")
    assert [m["rollout/engine_restarts"] for m in got] == [0, 1]
    assert [compared(m) for m in got] == [compared(m) for m in expected]


def test_an_engine_that_dies_again_stops_the_run_with_the_cause(setup, tmp_path):
    run = train(setup, tmp_path / "out", dying_engine(tmp_path, dies_at=(1, 2)), torchrun=False)
    assert run.returncode == 1
    assert run.stderr.rstrip().splitlines()[-1] == (
        "error: the rollout engine died again during generate right after a restart: "
        "test: the engine dies at generate call 2")
    assert "restarting it with the actor's current weights" in run.stdout + run.stderr


class ScriptedHandle:
    """The colocated rollout's handle in miniature: `generate` raises the engine's death `deaths` times."""

    def __init__(self, deaths: int):
        self.deaths, self.calls = deaths, []

    def call(self, method, *args, **kwargs):
        self.calls.append(method.__name__)
        if method.__name__ == "restart_engine":
            return {"update_weights/stream_s": 0.5}
        if method.__name__ == "generate" and self.deaths:
            self.deaths -= 1
            raise WorkerError("rollout", "generate", 1, "here", "Traceback ...\n"
                              "megarl.rollout.base.EngineDied: the scheduler died")
        return f"{method.__name__} done"

    def submit(self, method, *args, **kwargs):
        return Pending(lambda: self.call(method, *args, **kwargs))


def test_a_generation_in_flight_recovers_as_a_call_does():
    told = []
    rollout = RecoveringRollout(ScriptedHandle(deaths=1), told.append)
    assert rollout.generate_async(Batch()).result() == "generate done"
    assert rollout.handle.calls == ["generate", "restart_engine", "generate"] and rollout.restarts == 1
    assert told == ["rollout engine died during generate on rank 1 (the scheduler died); restarting it with the "
                    "actor's current weights and running the call again"]
    with pytest.raises(EngineFailure, match="died again during generate right after a restart: the scheduler died"):
        RecoveringRollout(ScriptedHandle(deaths=2), told.append).generate(Batch())
