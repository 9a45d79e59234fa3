"""The per-GPU memory model: what each offload flag removes from which phase, how activations scale with the token
budget, the engine's share (SGLang's rule) and the host copies."""

from dataclasses import replace

import pytest

from megarl.plan import plan_memory
from megarl.plan.calibration import GIB, gib
from megarl.plan.state import role_states

FRACTION = 0.5  # the recipe's rollout.gpu_memory_utilization


def drops(before, after) -> dict[str, int]:
    return {p.name: p.total - after.phase(p.name).total for p in before.phases}


# (role, flag): (phases the state leaves in full, the state's bytes per P, phases whose resident state it leaves)
# A flag that frees memory while the engine generates lowers gen (and sync, whose peak is when the KV cache resumes
# on a large GPU) by only 1 − fraction of it: the engine's share is a fraction of what the trainer leaves free.
OFFLOADS = {
    ("actor", "optimizer_offload"): ({"old_log_prob", "ref", "values", "update_critic", "update_actor"}, 12),
    ("actor", "grad_offload"): ({"old_log_prob", "ref", "values", "update_critic"}, 4),
    ("actor", "param_offload"): ({"ref", "values", "update_critic"}, 2),
    ("critic", "optimizer_offload"): ({"old_log_prob", "ref", "values", "update_critic", "update_actor"}, 12),
    ("critic", "grad_offload"): ({"old_log_prob", "ref", "values", "update_actor"}, 4),
    ("critic", "param_offload"): ({"old_log_prob", "ref", "update_actor"}, 2),
}


@pytest.mark.parametrize("role, flag", sorted(OFFLOADS))
def test_each_offload_lowers_exactly_its_phases_by_its_bytes(inputs_for, role, flag):
    # PPO with a KL loss: actor, critic and reference share the GPU; DP 2 shards the optimizer state.
    recipe = ["algorithm.adv_estimator=gae", "actor.megatron.optimizer_offload=false",
              "actor.megatron.tensor_model_parallel_size=2", "critic.megatron.tensor_model_parallel_size=2",
              "rollout.tensor_model_parallel_size=2"]
    before = inputs_for(*recipe, gpu_gib=1000.0)
    after = inputs_for(*recipe, f"{role}.megatron.{flag}=true", gpu_gib=1000.0)
    state = role_states(before)[role]
    full_phases, bytes_per_parameter = OFFLOADS[role, flag]
    freed = bytes_per_parameter * state.parameters // (state.optimizer_shards if flag == "optimizer_offload" else 1)
    assert state.optimizer_shards == 2
    plan_before, plan_after = plan_memory(before), plan_memory(after)
    for phase, dropped in drops(plan_before, plan_after).items():
        if phase in ("gen", "sync"):
            assert dropped == pytest.approx((1 - FRACTION) * freed, abs=1), phase
        else:
            assert dropped == (freed if phase in full_phases else 0), phase
    assert plan_after.phase("sync").note == "once the KV cache resumes"


def test_a_resident_reference_holds_its_weights_in_every_phase_and_none_in_host_memory(inputs_for):
    recipe = ["algorithm.adv_estimator=gae", "actor.megatron.tensor_model_parallel_size=2",
              "critic.megatron.tensor_model_parallel_size=2", "rollout.tensor_model_parallel_size=2"]
    offloaded = plan_memory(inputs_for(*recipe, gpu_gib=1000.0))
    resident_inputs = inputs_for(*recipe, "ref.megatron.param_offload=false", gpu_gib=1000.0)
    resident = plan_memory(resident_inputs)
    weights = 2 * role_states(resident_inputs)["reference"].parameters
    for phase, added in drops(resident, offloaded).items():
        if phase in ("gen", "sync"):
            assert added == pytest.approx((1 - FRACTION) * weights, abs=1), phase
        else:
            assert added == (0 if phase == "ref" else weights), phase
    assert offloaded.hosts[0].part("reference weights") > 0 and resident.hosts[0].part("reference weights") == 0


def test_host_memory_holds_what_the_offloads_move(inputs_for):
    before = inputs_for("actor.megatron.optimizer_offload=false")
    state = role_states(before)["actor"]
    host = plan_memory(before).hosts[0]
    gpus = 4
    assert host.part("reference weights") == gpus * 2 * state.parameters  # offloaded by default
    assert host.part("actor optimizer") == 0
    with_all = inputs_for("actor.megatron.optimizer_offload=true", "actor.megatron.param_offload=true",
                          "actor.megatron.grad_offload=true")
    host = plan_memory(with_all).hosts[0]
    assert host.part("actor optimizer") == gpus * 16 * state.parameters // state.optimizer_shards
    assert host.part("actor weights") == gpus * 2 * state.parameters
    assert host.part("actor grads") == 0  # freed, not copied


def test_bf16_gradient_buffers_halve_the_gradients_in_every_phase_that_holds_them(inputs_for):
    fp32, bf16 = plan_memory(inputs_for()), plan_memory(inputs_for("actor.megatron.grad_reduce_in_fp32=false"))
    parameters = role_states(inputs_for())["actor"].parameters
    for phase in ("gen", "update_actor"):
        assert fp32.phase(phase).part("actor grads") == 4 * parameters
        assert bf16.phase(phase).part("actor grads") == 2 * parameters
    assert fp32.phase("gen").total - bf16.phase("gen").total >= parameters
    copy = bf16.phase("update_actor").part("gradient copy to host")  # the recipe offloads its optimizer
    assert fp32.phase("update_actor").total - bf16.phase("update_actor").total == 2 * parameters - copy


def test_bf16_gradients_reach_an_offloaded_optimizer_through_a_float32_copy_on_its_stream(inputs_for):
    """The hybrid optimizer copies each gradient shard to its float32 host copy on a stream of its own; torch converts
    a non-blocking device-to-host copy on the device, one parameter at a time: 4 bytes per element of the largest."""
    shape = inputs_for().policy
    largest = shape.vocab // 4 * shape.hidden  # the embedding's and the output layer's shards at TP 4
    assert largest > 2 * shape.ffn // 4 * shape.hidden
    for overrides, expected in ((["actor.megatron.grad_reduce_in_fp32=false"], 4 * largest),
                                ([], 0),  # float32 gradients go to the host as they are
                                (["actor.megatron.grad_reduce_in_fp32=false", "actor.megatron.optimizer_offload=false",
                                  "actor.ppo_max_token_len_per_gpu=30000"], 0)):  # no host copy: the step is here
        update = plan_memory(inputs_for(*overrides)).phase("update_actor")
        assert update.part("gradient copy to host") == expected, overrides


def test_the_optimizer_step_on_the_gpu_holds_the_square_roots_of_adams_second_moments(inputs_for):
    """torch's foreach AdamW takes the square root of a group's second moments at once (4 bytes per parameter of the
    shard); with bf16 gradients megatron first copies them to float32 (4 more). After the backward, whose tensors are
    gone: the step is the update's peak where it holds more than the backward's tensors."""
    recipe = ["actor.megatron.optimizer_offload=false", "actor.ppo_max_token_len_per_gpu=2048"]
    state = role_states(inputs_for(*recipe))["actor"]
    shard = state.parameters // state.optimizer_shards
    for grads, copies in (("true", 1), ("false", 2)):
        update = plan_memory(inputs_for(*recipe, f"actor.megatron.grad_reduce_in_fp32={grads}")).phase("update_actor")
        assert update.note == "in the optimizer step"
        assert update.part("optimizer step") == copies * 4 * shard
        assert update.part("activations") == update.part("logits") == 0
    offloaded = plan_memory(inputs_for("actor.ppo_max_token_len_per_gpu=2048")).phase("update_actor")
    assert offloaded.part("optimizer step") == 0 and offloaded.note == "" and offloaded.part("logits") > 0


def test_a_recomputed_layer_exists_once_the_output_layers_tensors_are_gone(inputs_for):
    """With full recomputation the backward first holds every layer's input and the vocabulary-sized tensors, then,
    layer by layer, one recomputed layer's activations: the larger moment counts, not their sum."""
    from megarl.plan.activations import layer_bytes, saved_bytes
    inputs = inputs_for("actor.ppo_max_token_len_per_gpu=8192")
    shape, mesh = inputs.policy, inputs.mesh("actor")
    update = plan_memory(inputs).phase("update_actor")
    assert update.part("activations") == saved_bytes(shape, mesh, 8192, "full")
    assert update.part("logits") + update.part("logit gradient") > layer_bytes(shape, mesh.tp, 8192)
    critic = inputs_for("algorithm.adv_estimator=gae", "critic.megatron.tensor_model_parallel_size=4",
                        "critic.megatron.recompute_granularity=full", "critic.megatron.optimizer_offload=true",
                        "critic.ppo_max_token_len_per_gpu=8192")
    update_critic = plan_memory(critic).phase("update_critic")  # no logits: the recomputed layer is the larger moment
    assert update_critic.part("activations") == (saved_bytes(shape, critic.mesh("critic"), 8192, "full")
                                                  + layer_bytes(shape, critic.mesh("critic").tp, 8192))


def test_an_update_reserves_one_more_block_of_its_largest_tensor(inputs_for):
    """The caching allocator held one block of the update's largest tensor beyond its live tensors in every sampled
    update (Calibration.update_cache_blocks): the actor's logits, the critic's fc1 output."""
    from megarl.plan.activations import largest_activation_bytes
    inputs = inputs_for("algorithm.adv_estimator=gae", "critic.megatron.tensor_model_parallel_size=4",
                        "critic.ppo_max_token_len_per_gpu=8192")
    plan = plan_memory(inputs)
    actor, critic = plan.phase("update_actor"), plan.phase("update_critic")
    assert actor.part("allocator cache") == actor.part("logits") > 0
    assert critic.part("allocator cache") == largest_activation_bytes(inputs.critic, inputs.mesh("critic"), 8192)
    none = replace(inputs, calibration=replace(inputs.calibration, update_cache_blocks=0))
    assert plan_memory(none).phase("update_actor").total == actor.total - actor.part("allocator cache")
    assert plan_memory(none).phase("old_log_prob") == plan.phase("old_log_prob")  # a forward pass: no such block


def test_activations_scale_linearly_with_the_token_budget(inputs_for):
    def update(budget, *more):
        phases = plan_memory(inputs_for(f"actor.ppo_max_token_len_per_gpu={budget}",
                                        f"actor.log_prob_max_token_len_per_gpu={budget}", *more))
        return phases.phase("update_actor"), phases.phase("old_log_prob")

    for recompute in ("full", "null", "selective"):
        (small, small_lp), (large, large_lp) = (update(budget, f"actor.megatron.recompute_granularity={recompute}")
                                                for budget in (6144, 12288))
        for part in ("activations", "logits", "logit gradient"):
            assert large.part(part) == 2 * small.part(part), (recompute, part)
        assert large_lp.part("activations") == 2 * small_lp.part("activations")
    (full, _), (none, _) = update(12288), update(12288, "actor.megatron.recompute_granularity=null")
    assert full.part("activations") < none.part("activations") / 3


def test_a_budget_below_one_sequence_or_above_the_batch_changes_nothing(inputs_for):
    def tokens(budget):
        return plan_memory(inputs_for(f"actor.ppo_max_token_len_per_gpu={budget}")).phase("update_actor").part("logits")

    one_sequence = 512 + 1024
    assert tokens(100) == tokens(one_sequence)  # a longer sample gets a micro-batch of its own
    mini_batch = 16 * 8 * one_sequence  # ppo_mini_batch_size × rollout.n samples on the one data-parallel rank
    assert tokens(10 * mini_batch) == tokens(mini_batch)


def test_a_measured_micro_batch_replaces_the_worst_case_in_its_phase_alone(inputs_for):
    worst = inputs_for("actor.ppo_max_token_len_per_gpu=12288")
    measured = replace(worst, micro_batch_tokens={"update_actor": 6144})
    worst_plan, measured_plan = plan_memory(worst), plan_memory(measured)
    for part in ("logits", "logit gradient"):
        assert 2 * measured_plan.phase("update_actor").part(part) == worst_plan.phase("update_actor").part(part)
    assert measured_plan.phase("old_log_prob") == worst_plan.phase("old_log_prob")


def test_the_engine_takes_its_fraction_of_what_the_trainer_leaves_free(inputs_for):
    inputs = inputs_for(gpu_gib=80.0)
    cal = inputs.calibration
    plan = plan_memory(inputs)
    gen = plan.phase("gen")
    resident = sum(size for name, size in gen.parts if name.startswith(("actor", "reference", "critic")))
    # Free when the engine measures it: less the trainer process's memory outside torch and the engine's context.
    taken = cal.trainer_process(4) + gib(cal.cuda_context_gib)
    engine = gen.part("engine weights") + gen.part("engine KV cache")
    assert engine == pytest.approx(FRACTION * (80 * GIB - taken - resident), abs=1)
    assert gen.part("engine weights") == 2 * inputs.policy.parameters // 4
    assert gen.part("engine runtime") == gib(cal.engine_runtime_gib)
    assert plan.kv_cache_tokens == gen.part("engine KV cache") // inputs.policy.kv_cache_bytes_per_token(4)
    assert gen.fits


def test_processes_of_a_run_on_several_gpus_hold_their_collectives_outside_torch(inputs_for):
    one_gpu = ["trainer.n_gpus_per_node=1", "actor.megatron.tensor_model_parallel_size=1",
               "rollout.tensor_model_parallel_size=1"]
    cal = inputs_for(gpu_gib=80.0).calibration
    alone, tp4 = plan_memory(inputs_for(*one_gpu, gpu_gib=80.0)), plan_memory(inputs_for(gpu_gib=80.0))
    for plan, trainer, engine in ((alone, cal.trainer_process_gib, cal.released_engine_gib),
                                  (tp4, cal.trainer_process_gib + cal.trainer_collectives_gib,
                                   cal.released_engine_gib + cal.engine_collectives_gib)):
        ref = plan.phase("ref")
        assert (ref.part("trainer process"), ref.part("released engine")) == (gib(trainer), gib(engine))
    # a trainer of one GPU beside an engine of one GPU: no collectives in either; TP 2 engines: in the engine's
    engines_tp2 = plan_memory(inputs_for("trainer.n_gpus_per_node=2", "actor.megatron.tensor_model_parallel_size=1",
                                         "rollout.tensor_model_parallel_size=2", gpu_gib=80.0)).phase("ref")
    assert engines_tp2.part("released engine") == gib(cal.released_engine_gib + cal.engine_collectives_gib)


def test_a_decode_batch_above_the_engines_cuda_graphs_runs_eagerly_beside_its_share(inputs_for):
    """64 prompts × 8 responses in one TP 4 engine: with graphs to batch 64 the 512 responses decode eagerly, their
    [batch × vocabulary] tensors in the engine's allocator; graphs to 512, or none asked of SGLang, hold them."""
    capped = inputs_for("rollout.engine_kwargs.cuda_graph_max_bs_decode=64", gpu_gib=80.0)
    plan = plan_memory(capped)
    batch = min(64 * 8, plan.kv_cache_tokens // 512)
    assert batch > 64
    per_entry = capped.calibration.eager_decode_bytes_per_entry
    assert plan.phase("gen").part("engine eager decode") == round(per_entry * batch * capped.policy.vocab)
    assert plan.phase("sync").part("engine eager decode") == 0  # the sync decodes nothing
    for overrides in (["rollout.engine_kwargs.cuda_graph_max_bs_decode=512"], []):
        assert plan_memory(inputs_for(*overrides, gpu_gib=80.0)).phase("gen").part("engine eager decode") == 0
    eager = plan_memory(inputs_for("rollout.engine_kwargs.disable_cuda_graph=true", gpu_gib=80.0)).phase("gen")
    assert eager.part("engine eager decode") == plan.phase("gen").part("engine eager decode")


def test_the_trainer_process_memory_outside_torch_is_in_every_phase_and_not_in_the_engine_share(inputs_for):
    """One GiB more of it raises each trainer phase by that GiB, and gen and a sync that peaks once the KV cache
    resumes by only 1 − fraction of it: the engine's share of free memory shrinks by the rest."""
    inputs = inputs_for(gpu_gib=80.0)
    more = replace(inputs, calibration=replace(inputs.calibration,
                                               trainer_process_gib=inputs.calibration.trainer_process_gib + 1))
    plan = plan_memory(inputs)
    assert plan.phase("sync").note == "once the KV cache resumes"
    for phase, rise in drops(plan_memory(more), plan).items():
        expected = (1 - FRACTION) * GIB if phase in ("gen", "sync") else GIB
        assert rise == pytest.approx(expected, abs=2), phase


def test_the_logits_are_held_in_bf16_without_an_fp32_copy(inputs_for):
    """The log-prob passes hold the output layer's bf16 logits, the update also their bf16 gradient, each
    [tokens × vocab/tp]: no float32 copy (megarl/models/forward.py keeps megatron's Float16Module from making one)."""
    for tp in (1, 2):
        inputs = inputs_for(f"actor.megatron.tensor_model_parallel_size={tp}",
                            f"rollout.tensor_model_parallel_size={tp}", "actor.ppo_max_token_len_per_gpu=4096",
                            "actor.log_prob_max_token_len_per_gpu=4096")
        bf16 = 2 * 4096 * inputs.policy.vocab // tp
        plan = plan_memory(inputs)
        for phase in ("old_log_prob", "ref", "update_actor"):
            assert plan.phase(phase).part("logits") == bf16, (tp, phase)
        assert plan.phase("update_actor").part("logit gradient") == bf16
        assert plan.phase("old_log_prob").part("logit gradient") == 0


def test_the_vocabulary_weight_gradient_takes_a_block_of_its_own_only_where_the_logits_are_smaller(inputs_for):
    """bf16 [vocab/tp × hidden] against the bf16 logits' 2 × tokens × vocab/tp bytes: with hidden 4096 it needs a
    block of its own below 4096 tokens per micro-batch."""
    def update(budget):
        inputs = inputs_for(f"actor.ppo_max_token_len_per_gpu={budget}",
                            f"actor.log_prob_max_token_len_per_gpu={budget}")
        return inputs.policy, plan_memory(inputs)

    shape, small = update(3072)
    assert shape.hidden == 4096
    assert small.phase("update_actor").part("vocabulary weight grad") == 2 * shape.vocab // 4 * shape.hidden
    assert small.phase("old_log_prob").part("vocabulary weight grad") == 0  # no gradients in a forward
    assert update(4096)[1].phase("update_actor").part("vocabulary weight grad") == 0


def test_a_phase_holds_its_micro_batch_tensors_and_an_update_one_cached_block(inputs_for):
    """A phase's transient parts are tensors it allocates (an update's also one cached block): the critic's only its
    activations (the value head's output is one number per token), the actor's also the vocabulary-sized ones."""
    plan = plan_memory(inputs_for("algorithm.adv_estimator=gae", "critic.megatron.tensor_model_parallel_size=4"))
    held = ("weights", "grads", "optimizer", "trainer process", "released engine")
    vocabulary = {"logits", "logit gradient"}
    for phase, expected in (("values", {"activations"}), ("update_critic", {"activations", "allocator cache"}),
                            ("old_log_prob", {"activations"} | vocabulary - {"logit gradient"}),
                            ("update_actor", {"activations", "allocator cache"} | vocabulary)):
        assert {name for name, _ in plan.phase(phase).parts if not name.endswith(held)} == expected, phase


def test_an_engine_share_without_room_for_a_sequence_is_a_problem(inputs_for):
    gen = plan_memory(inputs_for("rollout.gpu_memory_utilization=0.2", gpu_gib=24.0)).phase("gen")
    assert not gen.fits and gen.total < gen.limit
    assert "rollout.gpu_memory_utilization=0.2" in gen.problem and "fewer than one sequence (1536)" in gen.problem


def test_a_critic_with_its_own_gpus_is_planned_there(inputs_for):
    plan = plan_memory(inputs_for("algorithm.adv_estimator=gae", "critic.enable_resource_pool=true",
                                  "trainer.launcher=ray", "critic.n_gpus_per_node=4"))
    assert [p.name for p in plan.phases if p.pool == "critic"] == ["values", "update_critic"]
    assert "values" not in [p.name for p in plan.phases if p.pool == "trainer"]
    critic_values = plan.phase("values", "critic")
    assert critic_values.part("actor weights") == 0 and critic_values.part("critic weights") > 0
    assert [h.pool for h in plan.hosts] == ["trainer", "critic"]


def test_engines_with_gpus_of_their_own_are_planned_there(inputs_for):
    """`rollout.enable_resource_pool`: the trainer's GPUs hold no engine (no gen phase, nothing released beside the
    trainer's phases, a sync that only streams), and the engine's share is of its own GPU less the rollout worker's
    process and the engine's context."""
    # (the transformers engine, which the config lets have GPUs of its own, is planned as SGLang)
    pool = ["rollout.enable_resource_pool=true", "rollout.n_gpus_per_node=4", "trainer.launcher=ray",
            "rollout.name=transformers"]
    colocated, plan = plan_memory(inputs_for(gpu_gib=80.0)), plan_memory(inputs_for(*pool, gpu_gib=80.0))
    cal = inputs_for(gpu_gib=80.0).calibration
    assert [p.name for p in plan.phases if p.pool == "rollout"] == ["gen", "sync"]
    trainer = [p for p in plan.phases if p.pool == "trainer"]
    assert "gen" not in [p.name for p in trainer] and not any(p.part("released engine") for p in trainer)
    for phase in trainer:
        if phase.name != "sync":
            released = colocated.phase(phase.name).part("released engine")
            assert phase.total == colocated.phase(phase.name).total - released, phase.name
    sync = plan.phase("sync")
    assert {name for name, _ in sync.parts if not name.startswith("actor")} == {"trainer process", "sync bucket"}
    gen = plan.phase("gen", "rollout")
    engine = gen.part("engine weights") + gen.part("engine KV cache")
    taken = cal.trainer_process(4) + gib(cal.cuda_context_gib)
    assert engine == pytest.approx(FRACTION * (80 * GIB - taken), abs=1)
    assert gen.part("engine KV cache") > colocated.phase("gen").part("engine KV cache")  # no trainer state beside it
    assert plan.phase("sync", "rollout").total == gen.total + 2 * gib(cal.sync_bucket_gib)
    trainer_host, rollout_host = plan.hosts
    assert trainer_host.part("engine processes") == 0 and rollout_host.pool == "rollout"
    assert rollout_host.part("engine processes") == 4 * gib(cal.host_engine_gib)


def test_a_lora_actor_trains_only_its_adapters_and_is_its_own_reference(inputs_for):
    """Gradients and optimizer state shrink from the model's P parameters to the adapters' T; the adapters' weights
    join the model's; no reference copy visits the GPU, though its pass remains."""
    recipe = ["actor.megatron.optimizer_offload=false"]
    full = inputs_for(*recipe, gpu_gib=1000.0)
    lora = inputs_for(*recipe, "actor.lora.rank=32", gpu_gib=1000.0)
    states = role_states(lora)
    assert "reference" not in states and "reference" in role_states(full)
    actor = states["actor"]
    shape = lora.policy
    assert actor.adapters == shape.lora_gpu_parameters(4, 1, 32, ["linear_qkv", "linear_proj", "linear_fc1",
                                                                   "linear_fc2"])
    p, t = actor.parameters, actor.adapters
    assert 0 < t < p // 50
    before, after = plan_memory(full), plan_memory(lora)
    reference_weights = 2 * p
    saved = (4 + 12 // actor.optimizer_shards) * (p - t) - 2 * t  # gradients and Adam move to T, T's weights join

    def state(phase):
        return sum(size for name, size in phase.parts if name.startswith("actor"))

    assert state(before.phase("update_actor")) - state(after.phase("update_actor")) == saved
    assert before.phase("update_actor").part("optimizer step") == 4 * p // actor.optimizer_shards  # Adam's step
    assert drops(before, after)["ref"] == saved + reference_weights
    assert after.phase("ref") is not None
