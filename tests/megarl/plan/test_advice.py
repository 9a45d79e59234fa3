"""The cheapest change that fits: offloads first (optimizer, gradients, weights), then a lower token budget, then
a larger TP; every change named as an override with its value; one that leaves the updates room for the plan's
error first, else one that merely fits."""

from megarl.plan import cheapest_fix, plan_memory


def test_optimizer_offload_first_when_it_alone_fits(inputs_for):
    inputs = inputs_for("actor.megatron.optimizer_offload=false", gpu_gib=32.0)
    assert not plan_memory(inputs).fits
    advice = cheapest_fix(inputs)
    assert advice.overrides == ("actor.megatron.optimizer_offload=true",)
    assert advice.plan.fits


def test_gradient_offload_when_the_optimizer_is_offloaded_already(inputs_for):
    # The gradients stay beside the engine (whose share of what the trainer leaves free holds its weights but no KV
    # cache) and beside the reference's weights in its pass.
    inputs = inputs_for("actor.megatron.optimizer_offload=true", "actor.ppo_max_token_len_per_gpu=4096", gpu_gib=22.0)
    assert [e.name for e in plan_memory(inputs).failing] == ["gen", "ref", "sync"]
    advice = cheapest_fix(inputs)
    assert advice.overrides == ("actor.megatron.grad_offload=true",)
    assert advice.plan.kv_cache_tokens >= 1536


def test_a_token_budget_is_named_when_no_offload_helps(inputs_for):
    inputs = inputs_for("actor.ppo_max_token_len_per_gpu=131072", "actor.log_prob_max_token_len_per_gpu=12288",
                        gpu_gib=50.0)
    assert [e.name for e in plan_memory(inputs).failing] == ["update_actor"]
    advice = cheapest_fix(inputs)
    key, budget = advice.changes[-1]
    assert key == "actor.ppo_max_token_len_per_gpu" and budget % 256 == 0 and 1536 <= budget < 131072
    room = (1 - inputs.calibration.update_shortfall) * inputs.gpu_bytes
    assert advice.plan.phase("update_actor").total <= room
    larger = inputs.with_changes({**dict(advice.changes), key: budget + 256})
    assert plan_memory(larger).phase("update_actor").total > room  # the largest budget that leaves room, to the step


def test_a_change_that_merely_fits_when_none_leaves_room(inputs_for):
    # 18 layers of Qwen3-8B at TP 2 with optimizer and gradient offload on 23 GiB: fp32 gradients alone keep the
    # update above 86 % of the GPU at any token budget.
    inputs = inputs_for("actor.megatron.optimizer_offload=true", "actor.megatron.grad_offload=true",
                        "actor.megatron.tensor_model_parallel_size=2", "rollout.tensor_model_parallel_size=2",
                        "trainer.n_gpus_per_node=2", gpu_gib=23.0, layers=18)
    assert [e.name for e in plan_memory(inputs).failing] == ["update_actor"]
    advice = cheapest_fix(inputs)
    assert advice.overrides[-1].startswith("actor.ppo_max_token_len_per_gpu=")
    assert advice.plan.fits and [e.name for e in advice.plan.tight(inputs.calibration.update_shortfall)] == [
        "update_actor"]


def test_a_larger_tp_when_the_update_cannot_fit_otherwise(inputs_for):
    # 18 layers of Qwen3-8B on 2 GPUs at TP 1, every offload on and small token budgets: weights and gradients
    # alone exceed 28 GiB in the update.
    inputs = inputs_for("actor.megatron.tensor_model_parallel_size=1", "rollout.tensor_model_parallel_size=1",
                        "trainer.n_gpus_per_node=2", "actor.megatron.param_offload=true",
                        "actor.megatron.grad_offload=true", "actor.ppo_max_token_len_per_gpu=1536",
                        "actor.log_prob_max_token_len_per_gpu=1536", gpu_gib=28.0, layers=18)
    assert not plan_memory(inputs).fits
    advice = cheapest_fix(inputs)
    assert "actor.megatron.tensor_model_parallel_size=2" in advice.overrides
    assert advice.plan.fits


def test_no_advice_when_nothing_fits(inputs_for):
    assert cheapest_fix(inputs_for("trainer.n_gpus_per_node=4", gpu_gib=4.0)) is None
