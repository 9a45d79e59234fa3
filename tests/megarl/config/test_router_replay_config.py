"""`actor.router_replay.mode` (verl's key and values): refused, with the fix, where R3 cannot run (a dense model,
sequence parallelism, verl's R2), accepted on a mixture-of-experts model;
verl's recipes convert to it."""

import json

import pytest

from megarl.config import ConfigError, load_config
from megarl.convert.translate import convert

GRPO = ("trainer.n_gpus_per_node=2", "algorithm.adv_estimator=grpo", "rollout.n=2")


def model(tmp_path, **config) -> str:
    shape = {"model_type": "qwen3_moe", "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
             "num_experts": 4, **config}
    (tmp_path / "config.json").write_text(json.dumps(shape))
    return f"model.path={tmp_path}"


def problems(*overrides) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(overrides=list(overrides))
    return info.value.problems


@pytest.mark.parametrize("layout", [[], ["actor.megatron.pipeline_model_parallel_size=2"],
                                    ["actor.megatron.context_parallel_size=2"],
                                    ["rollout.multi_turn.enable=true", "rollout.multi_turn.tools=[python]"]])
def test_r3_is_accepted_on_a_mixture_of_experts_model(tmp_path, layout):
    """Also over pipeline stages and context-parallel ranks (tests/megarl/models/test_router_replay.py), and on
    multi-turn trajectories (tests/megarl/agent/test_loop.py)."""
    cfg = load_config(overrides=[model(tmp_path), *GRPO, "actor.router_replay.mode=R3", *layout])
    assert cfg.actor.router_replay.replays_rollout
    assert not load_config(overrides=[model(tmp_path), *GRPO]).actor.router_replay.replays_rollout


def test_r3_on_a_dense_model_is_refused(tmp_path):
    dense = model(tmp_path, model_type="qwen2", num_experts=None)
    assert problems(dense, *GRPO, "actor.router_replay.mode=R3") == [
        f"actor.router_replay.mode=R3 replays a mixture-of-experts router's choices, but {tmp_path} is a dense "
        "model: set actor.router_replay.mode=disabled"]


@pytest.mark.parametrize("overrides, problem", [
    (["actor.router_replay.mode=R2"], "actor.router_replay.mode=R2 (the trainer's own routing of the old-log-prob "
                                      "pass, replayed in the update) is not built: use R3"),
    (["actor.router_replay.mode=r3"], "actor.router_replay.mode='r3' is not one of: disabled, R3"),
])
def test_what_r3_cannot_do_yet_is_refused_with_the_fix(tmp_path, overrides, problem):
    found = problems(model(tmp_path), *GRPO, *overrides)
    assert any(p.startswith(problem) for p in found), found


def test_verls_router_replay_keys_convert():
    both = convert(["actor_rollout_ref.actor.megatron.router_replay.mode=R3",
                    "actor_rollout_ref.rollout.enable_rollout_routing_replay=True"], "ppo_megatron_trainer")
    assert both.lines["actor.router_replay.mode"].value == "R3" and not both.dropped
    assert convert(["actor_rollout_ref.actor.router_replay.mode=R3"]).lines["actor.router_replay.mode"].value == "R3"
    alone = convert(["actor_rollout_ref.rollout.enable_rollout_routing_replay=True"], "ppo_megatron_trainer")
    assert "actor.router_replay.mode" not in alone.lines
    assert any("only for the actor's R3 replay" in why for why in alone.dropped), alone.dropped
