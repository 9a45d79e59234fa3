"""The memory plan of a mixture-of-experts policy (Qwen3-30B-A3B's shape, a 12-layer proxy): expert parallelism
splits the experts' weights and gradients over the GPUs, while their optimizer state, sharded over the expert
data-parallel ranks, stays as large per GPU; the update holds the token dispatch's buffers."""

import json

import pytest

from megarl.config import load_config
from megarl.models.shapes import SHAPES
from megarl.plan import plan_inputs, plan_memory
from megarl.plan.advice import cheapest_fix
from megarl.plan.state import role_states
from megarl.plan.tokens import micro_batch_tokens
from tests.megarl.plan.conftest import QWEN3_8B_RECIPE

LAYERS = 12


def moe_inputs(model_dir, ep: int):
    """The 4-GPU GRPO recipe on Qwen3-30B-A3B's config at TP 1 (DP 4), the optimizer on the GPU."""
    (model_dir / "config.json").write_text(json.dumps(SHAPES["qwen3-30b-a3b"]))
    cfg = load_config(QWEN3_8B_RECIPE, [f"model.path={model_dir}", "actor.megatron.tensor_model_parallel_size=1",
                                        "rollout.tensor_model_parallel_size=1", "actor.megatron.optimizer_offload=false",
                                        f"actor.megatron.expert_model_parallel_size={ep}"])
    return plan_inputs(cfg, 1000.0, 1000.0, layers=LAYERS)[0]


def test_expert_parallelism_splits_the_experts_weights_and_grads_not_their_optimizer_state(tmp_path):
    whole, split = moe_inputs(tmp_path, 1), moe_inputs(tmp_path, 2)
    experts = whole.policy.expert_gpu_parameters(1, 1, 1)
    assert experts == LAYERS * 128 * 3 * 2048 * 768
    actor_whole, actor_split = role_states(whole)["actor"], role_states(split)["actor"]
    assert actor_whole.parameters - actor_split.parameters == experts // 2
    update_whole, update_split = plan_memory(whole).phase("update_actor"), plan_memory(split).phase("update_actor")
    assert update_whole.part("actor weights") - update_split.part("actor weights") == 2 * experts // 2
    assert update_whole.part("actor grads") - update_split.part("actor grads") == 4 * experts // 2
    # DP 4: each GPU keeps the state of a quarter of the experts, whether it holds all of them (EP 1, four shards)
    # or half (EP 2, two shards)
    assert update_whole.part("actor optimizer") == update_split.part("actor optimizer") == pytest.approx(
        12 * (actor_whole.parameters - experts) // 4 + 12 * experts // 4, abs=24)


def test_the_update_holds_the_dispatch_buffers(tmp_path):
    inputs = moe_inputs(tmp_path, 2)
    update = plan_memory(inputs).phase("update_actor")
    tokens = micro_batch_tokens(inputs, "update_actor")
    assert update.part("expert dispatch") == 2 * tokens * 2 * 8 * 2048 > 0  # bf16 send and receive, 8 copies each


def test_the_advice_tries_no_tensor_parallel_size_the_expert_grid_cannot_hold(tmp_path):
    """EP 2 on two GPUs leaves no room for TP 2 (EP × TP = 4 ranks): the advice, asked because the host memory does
    not fit, must not plan that layout (its expert data-parallel size would be 0)."""
    (tmp_path / "config.json").write_text(json.dumps(SHAPES["qwen3-30b-a3b"]))
    cfg = load_config(QWEN3_8B_RECIPE, [f"model.path={tmp_path}", "trainer.n_gpus_per_node=2",
                                        "actor.megatron.tensor_model_parallel_size=1",
                                        "actor.megatron.expert_model_parallel_size=2",
                                        "rollout.tensor_model_parallel_size=1"])
    inputs = plan_inputs(cfg, 139.8, 8.0, layers=8)[0]
    assert not plan_memory(inputs).fits
    advice = cheapest_fix(inputs)
    assert advice is None or ("actor.megatron.tensor_model_parallel_size", 2) not in advice.changes
