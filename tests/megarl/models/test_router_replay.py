"""Router replay (R3, megarl/models/router_replay.py) on a tiny Qwen3-MoE (4 experts, 2 per token): the engine serves
the model with perturbed routers, so it routes tokens elsewhere than the actor would. With the engine's routing the
actor's routers (read from megatron's router module itself) route every forwarded token of every packed sample as
the engine did, in the log-prob pass and in an update whose activation recompute runs the routers again; without it
they differ. Over two pipeline stages (each stage's routers take their layers' columns; the routing flips are summed
over the stages) and two context-parallel ranks (each takes its chunks of every sample's routing) the replayed passes
give one process's log-probs, flips and gradient. SGLang's encoding of the routing reads back to [tokens, layers,
top-k]."""

import base64
import json
import sys

import pytest
import torch

from megarl.rollout.routing import decode_sglang_routing
from parallel.topology import free_port
from tests.helpers import ENV, REPO_ROOT, make_model, run_command

WORKER = REPO_ROOT / "tests/megarl/models/router_replay_worker.py"


def perturbed_routers(model_dir, out_dir):
    """The model with noise on every router's weights: the same experts, routed otherwise."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                param.add_(torch.randn(param.shape, generator=generator) * param.std() * 2)
    model.save_pretrained(out_dir)
    return out_dir


FORWARDED = 9 + 14 + 6 + 11 + 8 - 5  # every sample's tokens but its last


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("replay")
    model = make_model("qwen3_moe", root / "model")
    return root, model, perturbed_routers(model, root / "engine")


def run_worker(models, name: str, processes: int = 1, pp: int = 1, cp: int = 1) -> dict:
    root, model, engine = models
    out = root / f"{name}.json"
    proc = run_command([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(processes),
                        "--master-port", str(free_port()), str(WORKER), str(model), str(engine), str(out), str(pp),
                        str(cp)], timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def replay(models):
    """One process's passes."""
    result = run_worker(models, "one")
    return {**result["ranks"][0], "routing_shape": result["routing_shape"]}


def test_the_log_prob_pass_routes_as_the_engine_did(replay):
    forwarded = FORWARDED * 2  # in both layers
    assert replay["routing_shape"] == [8, 2, 2]  # the 9-token sample: 8 forwarded tokens, 2 layers, top-2
    assert replay["replayed"] == {**replay["replayed"], "same": forwarded, "differ": 0, "calls": 4}
    assert replay["own"]["differ"] > forwarded // 10  # without replay the actor routes otherwise: the check bites
    assert replay["replayed"]["logprobs"] != replay["own"]["logprobs"]
    flips = sum(replay["replayed"]["flips"])  # (token, layer) pairs whose router would have chosen otherwise
    assert 0 < flips <= forwarded


def test_an_update_with_recompute_replays_in_both_router_calls(replay):
    forwarded = FORWARDED * 2
    update = replay["update"]
    assert update["calls"] == 8  # 2 micro-batches × 2 layers × (forward + recompute in the backward)
    assert update["same"] == 2 * forwarded and update["differ"] == 0
    assert update["grad_norm"] > 0


@pytest.mark.parametrize("layout", ["pp", "cp"])
def test_pipeline_stages_and_context_parallel_ranks_replay_as_one_process(models, replay, layout):
    ranks = run_worker(models, layout, processes=2, **{layout: 2})["ranks"]
    for rank in ranks:
        for logprobs, expected in zip(rank["replayed"]["logprobs"], replay["replayed"]["logprobs"]):
            assert logprobs == pytest.approx(expected, abs=1e-5)
        assert rank["replayed"]["flips"] == replay["replayed"]["flips"]  # both layers counted
        assert rank["update"]["grad_norm"] == pytest.approx(replay["update"]["grad_norm"], rel=1e-4)
    if layout == "pp":  # a layer on each stage: 2 micro-batches, and the recompute's second call in the update
        for rank in ranks:
            assert {key: rank["replayed"][key] for key in ("same", "differ", "calls")} == \
                {"same": FORWARDED, "differ": 0, "calls": 2}
            assert {key: rank["update"][key] for key in ("same", "differ", "calls")} == \
                {"same": 2 * FORWARDED, "differ": 0, "calls": 4}


def test_sglangs_routed_experts_decode_to_tokens_layers_top_k():
    routing = torch.randint(0, 128, (7, 3, 8), dtype=torch.int32)
    meta = {"routed_experts": base64.b64encode(routing.numpy().tobytes()).decode()}
    assert torch.equal(decode_sglang_routing(meta, (3, 8)), routing)
    with pytest.raises(RuntimeError, match="enable_return_routed_experts"):
        decode_sglang_routing({}, (3, 8))
