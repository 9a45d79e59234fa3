import dataclasses
import multiprocessing
from pathlib import Path

import pytest

from megarl.config import RM_RECIPE, SFT_RECIPE, ConfigError, MegaRLConfig, describe_keys, load_config, save_config
from megarl.config.loader import RL_RECIPE
from tests.helpers import REPO_ROOT


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_defaults_and_derived_values():
    cfg = load_config()
    assert isinstance(cfg, MegaRLConfig)
    assert cfg.critic.ppo_mini_batch_size == cfg.actor.ppo_mini_batch_size == 32
    assert cfg.actor.clip_ratio_low == cfg.actor.clip_ratio_high == cfg.actor.clip_ratio
    assert cfg.critic.optim.lr == 1e-5 and cfg.actor.optim.lr == 1e-6
    assert cfg.trainer.output_dir == "outputs/megarl/default"
    assert cfg.use_critic and not cfg.use_reference and cfg.world_size == 1


def test_overrides_beat_recipe_and_derived_values_follow(tmp_path):
    recipe = write(
        tmp_path / "r.yaml",
        "model:\n  path: /models/x\nactor:\n  ppo_mini_batch_size: 16\n  clip_ratio: 0.3\n"
        "trainer:\n  project_name: p\n  experiment_name: e\n",
    )
    cfg = load_config(recipe, ["actor.clip_ratio_high=0.28", "actor.optim.lr=1e-6", "trainer.experiment_name=f"])
    assert cfg.actor.ppo_mini_batch_size == cfg.critic.ppo_mini_batch_size == 16
    assert (cfg.actor.clip_ratio_low, cfg.actor.clip_ratio_high) == (0.3, 0.28)
    assert cfg.actor.optim.lr == 1e-6 and isinstance(cfg.actor.optim.lr, float)
    assert cfg.critic.model.path == "/models/x"
    assert cfg.trainer.output_dir == "outputs/p/f"
    explicit = load_config(recipe, ["critic.ppo_mini_batch_size=8"])
    assert (explicit.actor.ppo_mini_batch_size, explicit.critic.ppo_mini_batch_size) == (16, 8)


def test_config_is_immutable():
    cfg = load_config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.rollout.n = 4


def test_scalars_for_list_keys_and_free_form_dicts():
    cfg = load_config(overrides=["trainer.logger=wandb", "data.train_files=a.parquet",
                                 "rollout.engine_kwargs.attention_backend=triton",
                                 "reward.kwargs.method=flexible", "trainer.logger=[console,tensorboard]"])
    assert cfg.trainer.logger == ["console", "tensorboard"]
    assert cfg.data.train_files == ["a.parquet"]
    assert cfg.rollout.engine_kwargs == {"attention_backend": "triton"}
    assert cfg.reward.kwargs == {"method": "flexible"}


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.train_batchsize=3", "unknown key 'data.train_batchsize'. Did you mean data.train_batch_size"),
        ("data.ppo_mini_batch_size=2", "Did you mean actor.ppo_mini_batch_size"),
        ("actor_rollout_ref.rollout.n=8", "That is verl's name; in megarl it is rollout.n."),
        ("actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
         "in megarl it is actor.megatron.tensor_model_parallel_size"),
        ("custom_reward_function.path=r.py", "reward.function (path/to/file.py:function_name: verl's path and name joined)"),
        ("trainer.default_local_dir=/x", "in megarl it is trainer.output_dir"),
        ("zzz.qqq=1", "See `megarl train --help-keys`"),
        ("actor.ppo_mini_batch_size=many", "actor.ppo_mini_batch_size: Value 'many' of type 'str' could not be converted"),
        ("actor.use_kl_loss=perhaps", "actor.use_kl_loss"),
        ("actor=3", "'actor' is a section"),
        ("rollout.n", "write it as key.sub=value"),
        ('data.train_files="a"/b.parquet', "the value '\"a\"/b.parquet' is not one YAML value"),
        ("~rollout.n", "write it as key.sub=value"),
        ("+++rollout.n=2", "write it as key.sub=value"),
        ("+rollout.foo=1", "unknown key 'rollout.foo'"),
        ("++actor_rollout_ref.model.enable_gradient_checkpointing=True",
         "in megarl it is actor.megatron.recompute_granularity (true is full recomputation)."),
        ("actor_rollout_ref.actor.fsdp_config.param_offload=True", "in megarl it is actor.megatron.param_offload"),
        ("actor_rollout_ref.actor.fsdp_config.fsdp_size=8", "megarl has no counterpart: an FSDP sharding setting"),
        ("actor_rollout_ref.rollout.skip_tokenizer_init=True", "megarl has no rollout.skip_tokenizer_init."),
    ],
)
def test_bad_overrides_name_the_key_and_fix(override, message):
    with pytest.raises(ConfigError, match=_literal(message)):
        load_config(overrides=[override])


def _literal(text: str) -> str:
    import re

    return re.escape(text)


def test_all_unknown_recipe_keys_are_reported_together(tmp_path):
    recipe = write(tmp_path / "r.yaml", "data:\n  train_batchsize: 4\nrollout:\n  nn: 2\n")
    with pytest.raises(ConfigError) as info:
        load_config(recipe)
    assert len(info.value.problems) == 2
    assert all(str(recipe) in p for p in info.value.problems)
    assert "rollout.n" in info.value.problems[1]


def test_missing_and_malformed_recipes(tmp_path):
    write(tmp_path / "good.yaml", "data: {}\n")
    with pytest.raises(ConfigError, match="does not exist. Recipes in .*: good.yaml"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config(write(tmp_path / "bad.yaml", "data: [unclosed\n"))
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(write(tmp_path / "list.yaml", "- a\n- b\n"))
    assert load_config(write(tmp_path / "empty.yaml", "")) == load_config()


def test_saved_config_reloads_identically(tmp_path):
    cfg = load_config(overrides=["algorithm.adv_estimator=grpo", "rollout.n=4", "reward.kwargs.method=flexible"])
    path = save_config(cfg, tmp_path / "run")
    assert path == tmp_path / "run" / "config.yaml"
    assert load_config(path) == cfg
    assert "${" not in path.read_text()  # written resolved


def _save_repeatedly(directory: Path, start) -> None:
    cfg = load_config()
    start.wait()  # all writers past their imports: their saves overlap
    for _ in range(25):
        save_config(cfg, directory)


def test_ranks_saving_the_config_at_once_do_not_collide(tmp_path):
    """Processes writing the resolved config into the same directory at once leave one whole file and no other."""
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(4)
    writers = [ctx.Process(target=_save_repeatedly, args=(tmp_path, start)) for _ in range(4)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    assert [w.exitcode for w in writers] == [0] * 4
    assert load_config(tmp_path / "config.yaml") == load_config()
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]


def test_hydra_plus_overrides_of_megarl_keys_are_read_as_those_keys():
    notes = []
    cfg = load_config(overrides=["++rollout.n=8", "+trainer.val_before_train=False", "data.train_batch_size=128"],
                      notes=notes)
    assert (cfg.rollout.n, cfg.trainer.val_before_train, cfg.data.train_batch_size) == (8, False, 128)
    assert notes == ["note: read ++rollout.n, +trainer.val_before_train as megarl's rollout.n, "
                     "trainer.val_before_train (megarl needs no Hydra +/++)"]


def test_every_key_is_described():
    text = describe_keys()
    for key, kind in RL_RECIPE.keys.items():
        if kind != "section":
            assert f"\n{key} = " in "\n" + text
    assert "critic.ppo_mini_batch_size = ${actor.ppo_mini_batch_size}" in text


@pytest.mark.parametrize("recipe", sorted((REPO_ROOT / "recipes").glob("*.yaml")), ids=lambda p: p.name)
def test_every_bundled_recipe_loads(recipe):
    # SFT and reward-model recipes say so in their names
    schema = SFT_RECIPE if "_sft" in recipe.stem else RM_RECIPE if "_rm" in recipe.stem else RL_RECIPE
    cfg = load_config(recipe, schema=schema)
    assert cfg.data.train_files
