"""How many tokens one micro-batch of each trainer phase holds: its token budget with use_dynamic_bsz (a sample
longer than the budget gets a micro-batch of its own), else its micro-batch size × (prompt + response); never more
than the samples one data-parallel rank has for the pass."""

from __future__ import annotations

from dataclasses import dataclass

from megarl.plan.inputs import PlanInputs, get_key


@dataclass(frozen=True)
class Batching:
    """The recipe keys that size one phase's micro-batches."""

    role: str  # actor | critic: whose data-parallel size splits the samples
    dynamic_key: str  # use_dynamic_bsz
    tokens_key: str  # the token budget (with use_dynamic_bsz)
    samples_key: str  # the micro-batch size in samples (without)
    mini_batch_key: str | None  # an update's mini-batch (prompts); None: the pass covers the step's whole batch


BATCHING = {
    "old_log_prob": Batching("actor", "actor.use_dynamic_bsz", "actor.log_prob_max_token_len_per_gpu",
                             "actor.log_prob_micro_batch_size_per_gpu", None),
    # The reference runs in the actor's processes and follows the actor's use_dynamic_bsz (megarl/workers/inputs.py).
    "ref": Batching("actor", "actor.use_dynamic_bsz", "ref.log_prob_max_token_len_per_gpu",
                    "ref.log_prob_micro_batch_size_per_gpu", None),
    "values": Batching("critic", "critic.use_dynamic_bsz", "critic.forward_max_token_len_per_gpu",
                       "critic.forward_micro_batch_size_per_gpu", None),
    "update_critic": Batching("critic", "critic.use_dynamic_bsz", "critic.ppo_max_token_len_per_gpu",
                              "critic.ppo_micro_batch_size_per_gpu", "critic.ppo_mini_batch_size"),
    "update_actor": Batching("actor", "actor.use_dynamic_bsz", "actor.ppo_max_token_len_per_gpu",
                             "actor.ppo_micro_batch_size_per_gpu", "actor.ppo_mini_batch_size"),
}


def micro_batch_tokens(inputs: PlanInputs, phase: str) -> int:
    """Tokens in the largest micro-batch of `phase` on one data-parallel rank (all its context-parallel ranks)."""
    if phase in inputs.micro_batch_tokens:
        return inputs.micro_batch_tokens[phase]
    batching, cfg = BATCHING[phase], inputs.cfg
    sequence = inputs.sequence_tokens
    prompts = get_key(cfg, batching.mini_batch_key) if batching.mini_batch_key else cfg.data.train_batch_size
    samples = max(1, prompts * cfg.rollout.n // inputs.mesh(batching.role).dp)
    if get_key(cfg, batching.dynamic_key):
        return min(max(get_key(cfg, batching.tokens_key), sequence), samples * sequence)
    return min(get_key(cfg, batching.samples_key), samples) * sequence


def budget_key(inputs: PlanInputs, phase: str) -> str:
    """The key that lowers `phase`'s micro-batch: its token budget, or its micro-batch size without dynamic batching."""
    batching = BATCHING[phase]
    return batching.tokens_key if get_key(inputs.cfg, batching.dynamic_key) else batching.samples_key
