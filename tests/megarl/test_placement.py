from megarl.config import load_config
from megarl.placement import describe_placement, resource_pools, role_pools
from parallel.controller import PoolSpec


def test_everything_colocated_by_default():
    cfg = load_config(overrides=["trainer.nnodes=2", "trainer.n_gpus_per_node=4", "actor.use_kl_loss=true"])
    assert resource_pools(cfg) == [PoolSpec("main", (4, 4))]
    assert role_pools(cfg) == {"actor": "main", "rollout": "main", "reference": "main", "critic": "main"}


def test_grpo_without_kl_runs_no_critic_and_no_reference():
    cfg = load_config(overrides=["algorithm.adv_estimator=grpo", "rollout.n=4"])
    assert role_pools(cfg) == {"actor": "main", "rollout": "main"}


def test_critic_in_its_own_pool():
    cfg = load_config(overrides=["trainer.n_gpus_per_node=4", "critic.enable_resource_pool=true",
                                 "critic.nnodes=2", "critic.n_gpus_per_node=2"])
    assert resource_pools(cfg) == [PoolSpec("main", (4,)), PoolSpec("critic", (2, 2))]
    assert role_pools(cfg)["critic"] == "critic" and resource_pools(cfg)[1].world_size == 4


def test_placement_is_described_for_the_user(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    cfg = load_config(overrides=["trainer.n_gpus_per_node=4", "critic.enable_resource_pool=true",
                                 "critic.nnodes=2", "critic.n_gpus_per_node=2"])
    assert describe_placement(cfg).splitlines() == [
        "launcher: ray (trainer.launcher=auto)",
        "pool main: 1 node × 4 GPUs, one process per GPU hosting actor, rollout",
        "pool critic: 2 nodes × 2 GPUs, one process per GPU hosting critic",
    ]
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "1")
    assert describe_placement(cfg).startswith("launcher: torchrun (trainer.launcher=auto)")


def test_reward_model_colocated_or_in_its_own_pool():
    rm = ["algorithm.adv_estimator=grpo", "rollout.n=2", "reward.model.path=/rm", "trainer.n_gpus_per_node=4"]
    assert load_config(overrides=rm).reward_model_world_size == 4
    assert role_pools(load_config(overrides=rm))["reward_model"] == "main"
    cfg = load_config(overrides=[*rm, "reward.model.enable_resource_pool=true", "reward.model.n_gpus_per_node=1"])
    assert resource_pools(cfg) == [PoolSpec("main", (4,)), PoolSpec("reward_model", (1,))]
    assert role_pools(cfg)["reward_model"] == "reward_model" and cfg.reward_model_world_size == 1
