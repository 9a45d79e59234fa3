"""Each role's typed inputs, derived from a recipe once."""

from dataclasses import replace

from megarl.config import SFT_RECIPE, load_config
from megarl.models.packing import MicroBatching
from megarl.workers.inputs import role_inputs, sft_inputs


def test_roles_a_recipe_runs_get_inputs():
    grpo = role_inputs(load_config(overrides=["algorithm.adv_estimator=grpo", "rollout.n=2"]), total_steps=3)
    assert grpo.critic is None and grpo.reference is None and grpo.actor.total_steps == 3
    ppo = role_inputs(load_config(overrides=["actor.use_kl_loss=true"]), total_steps=3)
    assert ppo.critic is not None and ppo.reference is not None


def test_log_probs_are_taken_at_the_sampling_temperature_or_one_when_greedy():
    sampled = role_inputs(load_config(overrides=["rollout.temperature=0.7", "actor.use_kl_loss=true"]), 1)
    assert sampled.actor.temperature == sampled.reference.temperature == 0.7
    greedy = role_inputs(load_config(overrides=["rollout.temperature=0", "actor.use_kl_loss=true"]), 1)
    assert greedy.actor.temperature == greedy.reference.temperature == 1.0


def test_micro_batching_and_update_schedule_follow_the_sections():
    cfg = load_config(overrides=[
        "rollout.n=4", "actor.ppo_mini_batch_size=8", "actor.use_dynamic_bsz=true",
        "actor.ppo_max_token_len_per_gpu=99", "actor.log_prob_micro_batch_size_per_gpu=5",
        "ref.log_prob_max_token_len_per_gpu=77", "actor.use_kl_loss=true", "critic.ppo_epochs=2",
        "data.max_response_length=64", "actor.loss_agg_mode=seq-mean-token-sum-norm"])
    inputs = role_inputs(cfg, 1)
    assert inputs.actor.update.mini_batch_samples == 32 and inputs.actor.update.loss_scale_factor == 64
    assert inputs.actor.update.micro == MicroBatching(True, 1, 99)
    assert inputs.actor.log_prob == MicroBatching(True, 5, 99)
    assert inputs.reference.log_prob == MicroBatching(True, 5, 77)  # the actor's dynamic flag, the ref's sizes
    assert inputs.critic.update.epochs == 2 and inputs.critic.update.loss_agg_mode == "seq-mean-token-sum-norm"
    assert inputs.actor.loss.kl_loss_coef == cfg.actor.kl_loss_coef
    assert role_inputs(load_config(), 1).actor.loss.kl_loss_coef is None


def test_the_reference_is_offloaded_unless_its_section_says_not():
    assert role_inputs(load_config(overrides=["actor.use_kl_loss=true"]), 1).reference.param_offload is True
    resident = load_config(overrides=["actor.use_kl_loss=true", "ref.megatron.param_offload=false"])
    assert role_inputs(resident, 1).reference.param_offload is False


def test_micro_batching_splits_by_count_or_token_budget():
    assert MicroBatching(False, 2, 0).split([5, 5, 5]) == [[0, 1], [2]]
    assert MicroBatching(True, 1, 10).split([5, 5, 5, 5]) == [[0, 2], [1, 3]]


def test_sft_inputs():
    cfg = load_config(overrides=["data.micro_batch_size_per_gpu=8", "model.tokenizer_path=/tok"], schema=SFT_RECIPE)
    inputs = sft_inputs(cfg, 7)
    assert inputs.micro == MicroBatching(False, 8, cfg.data.max_token_len_per_gpu) and inputs.total_steps == 7
    assert inputs.tokenizer_path == "/tok" and inputs.model.megatron == cfg.actor.megatron


def test_reward_model_inputs_say_where_it_runs_and_whether_it_reads_the_policys_ids(tmp_path):
    from megarl.models.tokenizer import PLAIN_TEMPLATE
    from tests.helpers import make_tokenizer

    for name, vocab in (("policy", 400), ("same", 400), ("other", 300)):
        make_tokenizer(tmp_path / name, vocab_size=vocab)
    base = ["algorithm.adv_estimator=grpo", "rollout.n=2", f"model.path={tmp_path / 'policy'}"]

    def inputs(*extra):
        return role_inputs(load_config(overrides=[*base, *extra]), 1).reward_model

    same = inputs(f"reward.model.path={tmp_path / 'same'}")
    assert same.retemplate is None and not same.resident
    assert same.forward == MicroBatching(False, 1, 16384)  # the actor's log-prob batching by default
    batching = inputs(f"reward.model.path={tmp_path / 'same'}", "reward.model.use_dynamic_bsz=true",
                      "reward.model.micro_batch_size_per_gpu=3", "reward.model.max_token_len_per_gpu=77")
    assert batching.forward == MicroBatching(True, 3, 77)  # what the worker splits its passes with
    other = inputs(f"reward.model.path={tmp_path / 'other'}", "reward.model.enable_resource_pool=true")
    assert other.retemplate.policy_tokenizer == str(tmp_path / "policy") and other.resident
    cfg = load_config(overrides=[*base, f"reward.model.path={tmp_path / 'same'}"])
    model = replace(cfg.reward.model, chat_template=PLAIN_TEMPLATE)  # a Jinja template, as a recipe YAML holds it
    templated = role_inputs(replace(cfg, reward=replace(cfg.reward, model=model)), 1).reward_model
    assert templated.retemplate.chat_template == PLAIN_TEMPLATE
