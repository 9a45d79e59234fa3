"""The reshard layer into engines with expert parallelism of their own (parallel/reshard.py, `EngineExperts`): four
ranks (CPU, gloo) stream a tiny Qwen3-MoE of 4 experts into engines of two ranks, each engine rank holding two experts
whole. Each rank's sink gets its engine rank's experts whole, equal to the checkpoint's, and placeholders for the
others; where the training ranks hold the experts as the engine ranks do (EP 2), no expert travels; where each
training rank holds one (EP 4), each rank receives only those of its engine rank's that it lacks."""

import json
import sys
from pathlib import Path

import pytest

from parallel.topology import free_port
from tests.helpers import ENV, make_model, run_command

WORKER = Path(__file__).with_name("expert_reshard_worker.py")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_model("qwen3_moe", tmp_path_factory.mktemp("moe") / "model")


def stream(model, out: Path, ep: int) -> list[dict]:
    proc = run_command([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4", "--master-port",
                        str(free_port()), str(WORKER), str(model), str(out), "--ep", str(ep), "--rollout-tp", "2"],
                       timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def own(rank_report: dict) -> list[int]:
    """The experts of the rank's engine rank."""
    return [2 * rank_report["engine_rank"], 2 * rank_report["engine_rank"] + 1]


@pytest.mark.parametrize("ep", [2, 4])
def test_each_engine_rank_gets_its_experts_whole(model, tmp_path, ep):
    ranks = stream(model, tmp_path / "report.json", ep)
    assert [r["engine_rank"] for r in ranks] == [0, 1, 0, 1]
    for r in ranks:
        assert r["whole"] == own(r) and r["placeholders"] == [e for e in range(4) if e not in own(r)], r
    # Training rank r holds the experts of its expert-parallel rank r mod ep; what it lacks of its engine rank's two
    # comes to it alone, 2 layers × (gate, up, down: 64 × 32 fp32) an expert.
    lacking = [len(set(own(r)) - {e for e in range(4) if e * ep // 4 == rank % ep}) for rank, r in enumerate(ranks)]
    assert lacking == ([0, 0, 0, 0] if ep == 2 else [1, 2, 2, 1])
    assert [r["bytes_received"] for r in ranks] == [n * 2 * 3 * 64 * 32 * 4 for n in lacking]
