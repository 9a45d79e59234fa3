"""`reward.judge`'s keys load with their defaults, and each bad value is one problem that names its key."""

import pytest

from megarl.config import load_config
from tests.megarl.config.test_validate import one_problem

JUDGE = ["reward.judge.model.path=judge"]


def test_the_judge_is_off_without_a_model_and_its_defaults_are_greedy_last_number():
    assert load_config().reward.judge.model.path is None
    judge = load_config(overrides=JUDGE).reward.judge
    assert (judge.parse.type, judge.parse.min, judge.parse.max) == ("last_number", 0.0, 10.0)
    assert (judge.sampling.temperature, judge.weight, judge.unparsed_score) == (0.0, 1.0, 0.0)
    assert "{response}" in judge.prompt and "{prompt}" in judge.prompt


def test_a_judge_alone_may_reward():
    assert "reward model or a judge" in one_problem("reward.rule_weight=0")
    assert load_config(overrides=[*JUDGE, "reward.rule_weight=0"]).reward.scored_by_models


@pytest.mark.parametrize("overrides, message", [
    (["reward.judge.parse.type=last_nmber"], "reward.judge.parse.type='last_nmber' is not one of: last_number, "
                                              "regex, yes_no. Did you mean 'last_number'?"),
    (["reward.judge.parse.min=5", "reward.judge.parse.max=5"], "reward.judge.parse.min=5.0 and max=5.0 must be "
                                                               "finite with min < max"),
    (["reward.judge.parse.type=regex"], "reward.judge.parse.type=regex needs reward.judge.parse.pattern"),
    (["reward.judge.parse.type=regex", "reward.judge.parse.pattern='Score: (\\d+'"],
     "reward.judge.parse.pattern='Score: (\\\\d+' is not a regular expression"),
    (["reward.judge.parse.type=regex", "reward.judge.parse.pattern='Score: (\\d+)'", "reward.judge.parse.group=2"],
     "reward.judge.parse.group=2 must name one of the pattern's 1 groups"),
    (["reward.judge.parse.type=yes_no", "reward.judge.parse.no=good", "reward.judge.parse.yes=good"],
     "reward.judge.parse.yes='good' and no='good' must be two different words"),
    (["reward.judge.parse.type=yes_no", "reward.judge.parse.yes=yes", "reward.judge.parse.no=no"],
     "reward.judge.parse.yes=True, no=False: YAML read the word as a boolean; quote it"),
    (["reward.judge.prompt='Rate {prompt}'"], "reward.judge.prompt must show the judge the response: put "
                                              "{response} in it"),
    (["reward.judge.prompt='Rate {response'"], "reward.judge.prompt is not a template"),
    (["reward.judge.prompt='Rate {response.text}'"], "{response.text} is not a field name"),
    (["reward.judge.sampling.temperature=-1"], "reward.judge.sampling.temperature=-1.0 must be ≥ 0"),
    (["reward.judge.sampling.max_new_tokens=0"], "reward.judge.sampling.max_new_tokens=0 must be at least 1"),
    (["reward.judge.sampling.top_k=0"], "reward.judge.sampling.top_k=0 must be -1 (off) or ≥ 1"),
    (["reward.judge.weight=nan"], "reward.judge.weight=nan must be a finite number"),
    (["reward.judge.unparsed_score=inf"], "reward.judge.unparsed_score=inf must be a finite number"),
    (["reward.judge.enable_resource_pool=true", "reward.judge.n_gpus_per_node=0"],
     "reward.judge.enable_resource_pool=true needs GPUs: set reward.judge.nnodes × reward.judge.n_gpus_per_node"),
    (["reward.judge.enable_resource_pool=true", "reward.judge.n_gpus_per_node=3"],
     "data.train_batch_size × rollout.n = 64 responses cannot be shared among the judge's 3 engines (one on each GPU "
     "of reward.judge.nnodes × reward.judge.n_gpus_per_node)"),
    (["algorithm.adv_estimator=remax"], "algorithm.adv_estimator=remax cannot run with reward.judge"),
    (["trainer.n_gpus_per_node=2", "actor.megatron.tensor_model_parallel_size=2", "rollout.tensor_model_parallel_size=2",
      "algorithm.adv_estimator=reinforce_plus_plus", "data.train_batch_size=3", "actor.ppo_mini_batch_size=3"],
     "data.train_batch_size × rollout.n = 3 responses cannot be shared among the judge's 2 engines"),
    (["reward.judge.gpu_memory_utilization=0.6"], "rollout.gpu_memory_utilization=0.5 + "
                                                  "reward.judge.gpu_memory_utilization=0.6 must be below 1"),
])
def test_a_bad_judge_value_names_its_key(overrides, message):
    assert message in one_problem(*JUDGE, *overrides)


def test_parser_settings_load_and_literal_braces_are_no_field():
    cfg = load_config(overrides=[*JUDGE, "reward.judge.parse.type=regex", "reward.judge.parse.pattern='Score: (\\d+)'",
                                 "reward.judge.prompt='{{json}} {response} vs {answer}'"])
    assert cfg.reward.judge.parse.pattern == "Score: (\\d+)"
    quoted = load_config(overrides=[*JUDGE, "reward.judge.parse.type=yes_no", "reward.judge.parse.yes=\"yes\""])
    assert quoted.reward.judge.parse.yes == "yes"


def test_a_judge_on_gpus_of_its_own_gets_a_pool_and_may_take_any_share():
    from megarl.placement import JUDGE_POOL, resource_pools, role_pools

    cfg = load_config(overrides=[*JUDGE, "reward.judge.enable_resource_pool=true", "reward.judge.n_gpus_per_node=2",
                                 "reward.judge.gpu_memory_utilization=0.8"])
    assert role_pools(cfg)["judge"] == JUDGE_POOL and cfg.judge_world_size == 2
    assert [(pool.name, pool.gpus_per_node) for pool in resource_pools(cfg)] == [("main", (1,)), (JUDGE_POOL, (2,))]
    assert cfg.gpus == cfg.world_size + 2
    assert role_pools(load_config(overrides=JUDGE))["judge"] == "main"
