"""The driver side of training checkpoints, on roles whose checkpoint is one file (the workers' side is
tests/megarl/models/test_checkpoint.py, both together tests/megarl/trainer/test_resume.py): when saves happen, the
atomic commit, pruning, which checkpoint a resume picks, the errors for a bad resume path, the restored state; the
manifest a save ends with, and damaged checkpoints (skipped by auto, an error as a resume path; both together in
test_damaged_resume.py)."""

import json
import random
import re
import zlib
from pathlib import Path

import pytest

from megarl.algorithms import make_kl_controller
from megarl.config import ConfigError, load_config
from megarl.data.dataset import PromptLoader
from megarl.trainer.ckpt_manifest import IncompleteCheckpoint
from megarl.trainer.checkpoint import (
    TRACKER,
    Checkpointer,
    checkpoints_root,
    complete_steps,
    find_resume_checkpoint,
)


class FileRole:
    """A trained role whose checkpoint is its role.json, holding a value the test sets."""

    def __init__(self, name: str):
        self.name, self.value, self.loaded_from, self.fail = name, 0, None, False

    def save_checkpoint(self, path: str) -> list[str]:
        if self.fail:
            raise RuntimeError("a rank died")
        Path(path).mkdir()
        (Path(path) / "role.json").write_text(json.dumps({"role": self.name, "value": self.value}))
        return ["role.json"]

    def load_checkpoint(self, path: str) -> None:
        self.loaded_from = path
        self.value = json.loads((Path(path) / "role.json").read_text())["value"]


def config(tmp_path, *extra):
    return load_config(None, [f"trainer.output_dir={tmp_path}", "algorithm.adv_estimator=grpo", "rollout.n=2", *extra])


def checkpointer(cfg, roles=None):
    loader = PromptLoader([{"prompt_ids": [i]} for i in range(8)], 2, seed=cfg.trainer.seed)
    kl = make_kl_controller("adaptive", 0.1, 0.05, 10)
    roles = roles or {"actor": FileRole("actor"), "critic": None}
    return Checkpointer(cfg, True, roles, {"loader": loader, "kl_controller": kl}), loader, kl, roles


def entries(root):
    return sorted(p.name for p in root.iterdir())


def test_saves_every_save_freq_steps_and_the_last_keeping_the_newest(tmp_path):
    cfg = config(tmp_path, "trainer.save_freq=2", "trainer.max_ckpt_to_keep=2")
    checkpoints, *_ = checkpointer(cfg)
    root = checkpoints_root(cfg)
    for step in range(1, 6):
        checkpoints.maybe_save(step, last_step=5)
        if step == 2:
            assert entries(root) == ["global_step_2", TRACKER]
    assert entries(root) == ["global_step_4", "global_step_5", TRACKER]
    assert (root / TRACKER).read_text() == "5"
    assert json.loads((root / "global_step_5" / "trainer_state.json").read_text())["step"] == 5


def test_pruning_keeps_the_checkpoint_just_saved(tmp_path):
    """A run resumed from an older checkpoint (here: started afresh) saves below the numbers an earlier run left."""
    cfg = config(tmp_path, "trainer.save_freq=1", "trainer.max_ckpt_to_keep=2")
    checkpoints, *_ = checkpointer(cfg)
    for step in (4, 5):
        checkpoints.save(step)
    checkpoints.save(1)
    assert complete_steps(checkpoints_root(cfg)) == [1, 5]


def test_no_saves_without_save_freq(tmp_path):
    checkpoints, *_ = checkpointer(config(tmp_path))
    for step in (1, 2):
        checkpoints.maybe_save(step, last_step=2)
    assert not checkpoints_root(config(tmp_path)).exists()


def test_leftovers_of_crashed_saves_are_replaced_and_removed(tmp_path):
    cfg = config(tmp_path, "trainer.save_freq=1")
    root = checkpoints_root(cfg)
    (root / "global_step_2.partial" / "actor").mkdir(parents=True)
    (root / "global_step_2.partial" / "actor" / "half_written").write_text("")
    (root / "global_step_7.partial").mkdir()
    (root / "global_step_1.trash").mkdir()
    checkpoints, *_ = checkpointer(cfg)
    checkpoints.save(2)
    assert entries(root) == ["global_step_2", TRACKER]
    assert entries(root / "global_step_2" / "actor") == ["role.json"]


def test_a_save_that_fails_leaves_the_previous_checkpoint_the_latest(tmp_path):
    cfg = config(tmp_path, "trainer.save_freq=1")
    checkpoints, _, _, roles = checkpointer(cfg)
    checkpoints.save(2)
    roles["actor"].fail = True
    with pytest.raises(RuntimeError):
        checkpoints.save(3)
    root = checkpoints_root(cfg)
    assert entries(root) == ["global_step_2", "global_step_3.partial", TRACKER]
    assert find_resume_checkpoint(cfg) == root / "global_step_2"


@pytest.mark.parametrize("tracker", [None, "", "garbage", "1", "3"])
def test_auto_resumes_from_the_newest_complete_checkpoint_whatever_the_tracker(tmp_path, tracker):
    cfg = config(tmp_path)
    checkpoints, *_ = checkpointer(cfg)
    for step in (1, 2):
        checkpoints.save(step)
    root = checkpoints_root(cfg)
    # A save of step 3 that died after writing its trainer state, before the rename: still not a checkpoint.
    (root / "global_step_3.partial").mkdir()
    (root / "global_step_3.partial" / "trainer_state.json").write_text("{}")
    if tracker is None:
        (root / TRACKER).unlink()
    else:
        (root / TRACKER).write_text(tracker)
    assert complete_steps(root) == [1, 2]
    assert find_resume_checkpoint(cfg) == root / "global_step_2"


def test_auto_without_checkpoints_and_disable_start_afresh(tmp_path):
    assert find_resume_checkpoint(config(tmp_path)) is None
    checkpointer(config(tmp_path))[0].save(1)
    assert find_resume_checkpoint(config(tmp_path, "trainer.resume_mode=disable")) is None


def test_resume_path_must_be_a_complete_checkpoint_of_the_recipe_roles(tmp_path):
    cfg = config(tmp_path)
    checkpoints, *_ = checkpointer(cfg)
    checkpoints.save(2)
    root = checkpoints_root(cfg)
    (root / "global_step_3.partial").mkdir()

    def resume_from(path, *extra):
        return find_resume_checkpoint(config(tmp_path, "trainer.resume_mode=resume_path",
                                             f"trainer.resume_from_path={path}", *extra))

    assert resume_from(root / "global_step_2") == root / "global_step_2"
    with pytest.raises(ConfigError, match="global_step_9 does not exist"):
        resume_from(root / "global_step_9")
    with pytest.raises(ConfigError, match=r"is not a complete checkpoint .* complete ones in .*: global_step_2"):
        resume_from(root / "global_step_3.partial")
    with pytest.raises(ConfigError, match="has no critic checkpoint, which this recipe trains"):
        resume_from(root / "global_step_2", "algorithm.adv_estimator=gae")


def test_load_restores_the_step_the_roles_and_the_driver_state(tmp_path):
    cfg = config(tmp_path, "trainer.save_freq=1")
    checkpoints, loader, kl, roles = checkpointer(cfg)
    batches = iter(loader)
    next(batches), next(batches), next(batches)
    kl.update(0.5, n_steps=4)
    roles["actor"].value = 7
    random.seed(3)
    checkpoints.save(3)
    expected_draw = random.random()

    fresh, fresh_loader, fresh_kl, fresh_roles = checkpointer(cfg, {"actor": FileRole("actor")})
    assert fresh.load(find_resume_checkpoint(cfg)) == 3
    assert fresh_loader.state_dict() == loader.state_dict() and fresh_kl.value == kl.value != 0.1
    assert fresh_roles["actor"].value == 7
    assert fresh_roles["actor"].loaded_from == str(checkpoints_root(cfg) / "global_step_3" / "actor")
    assert random.random() == expected_draw
    assert fresh.load(None) == 0


# Damaged checkpoints: every save ends with a manifest of its files' sizes and CRC-32s, which a resume checks.

def saved(tmp_path, *steps, extra=()):
    cfg = config(tmp_path, *extra)
    checkpoints, *_ = checkpointer(cfg)
    for step in steps:
        checkpoints.save(step)
    return cfg, checkpoints_root(cfg)


def truncate(path):
    path.write_bytes(path.read_bytes()[:10])


def flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x20  # the same size, other bytes: only the checksum tells
    path.write_bytes(bytes(data))


def one_warning(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_save_ends_with_a_manifest_of_every_file(tmp_path):
    _, root = saved(tmp_path, 1)
    manifest = json.loads((root / "global_step_1" / "manifest.json").read_text())
    assert sorted(manifest["files"]) == ["actor/role.json", "trainer_state.json"]
    data = (root / "global_step_1" / "trainer_state.json").read_bytes()
    assert manifest["files"]["trainer_state.json"] == [len(data), zlib.crc32(data)]


class ShardedRole(FileRole):
    """A role whose checkpoint also has a shard, which another process removes before the save ends (as a second run
    writing into the same output directory did)."""

    def save_checkpoint(self, path: str) -> list[str]:
        files = super().save_checkpoint(path)
        (Path(path) / "model").mkdir()
        return [*files, "model/.metadata", "model/__1_0.distcp"]


def test_a_checkpoint_missing_a_file_its_writers_listed_is_never_committed(tmp_path):
    cfg = config(tmp_path, "trainer.save_freq=1")
    checkpoints, *_ = checkpointer(cfg)
    checkpoints.save(1)
    incomplete, *_ = checkpointer(cfg, {"actor": ShardedRole("actor"), "critic": None})
    with pytest.raises(IncompleteCheckpoint, match=r"global_step_2.partial is incomplete, actor/model/.metadata, "
                                                   r"actor/model/__1_0.distcp missing \(was another run writing"):
        incomplete.save(2)
    root = checkpoints_root(cfg)
    assert complete_steps(root) == [1] and find_resume_checkpoint(cfg) == root / "global_step_1"
    assert not (root / "global_step_2.partial" / "manifest.json").exists()


DAMAGES = {  # name: (what happened to global_step_2, the reason the warning gives)
    "role file cut short": (lambda step: truncate(step / "actor" / "role.json"),
                            r"actor/role.json has 10 bytes, the manifest says \d+"),
    "role file changed": (lambda step: flip_a_byte(step / "actor" / "role.json"),
                          "actor/role.json fails its CRC-32 check"),
    "role file missing": (lambda step: (step / "actor" / "role.json").unlink(), "actor/role.json is missing"),
    "state cut short": (lambda step: truncate(step / "trainer_state.json"),
                        r"trainer_state.json has 10 bytes, the manifest says \d+"),
    "state changed": (lambda step: flip_a_byte(step / "trainer_state.json"),
                      "trainer_state.json fails its CRC-32 check"),
    "manifest cut short": (lambda step: truncate(step / "manifest.json"), "manifest.json cannot be read"),
}


@pytest.mark.parametrize("damage, why", DAMAGES.values(), ids=DAMAGES)
def test_auto_skips_a_damaged_newest_checkpoint_naming_the_file_and_keeps_it(tmp_path, capsys, damage, why):
    cfg, root = saved(tmp_path, 1, 2)
    damage(root / "global_step_2")
    capsys.readouterr()
    assert find_resume_checkpoint(cfg) == root / "global_step_1"
    assert re.fullmatch(rf"warning: skipping damaged checkpoint {root / 'global_step_2'}: {why}.*", one_warning(capsys))
    assert complete_steps(root) == [1, 2]  # skipped, not removed


def test_checkpoints_saved_before_manifests_still_resume_and_say_so(tmp_path, capsys):
    cfg, root = saved(tmp_path, 1, 2)
    for step in (1, 2):
        (root / f"global_step_{step}" / "manifest.json").unlink()
    assert find_resume_checkpoint(cfg) == root / "global_step_2"
    assert f"{root / 'global_step_2'} has no manifest.json" in capsys.readouterr().out
    (root / "global_step_2" / "trainer_state.json").write_text('{"step": 2, "rng"')  # cut short
    assert find_resume_checkpoint(cfg) == root / "global_step_1"
    assert "trainer_state.json cannot be read as JSON" in one_warning(capsys)


def test_auto_stops_when_no_checkpoint_verifies_and_removes_none(tmp_path, capsys):
    cfg, root = saved(tmp_path, 1, 2)
    for step in (1, 2):
        truncate(root / f"global_step_{step}" / "actor" / "role.json")
    with pytest.raises(ConfigError, match=rf"no checkpoint under {root} verifies \(global_step_2, global_step_1") as e:
        find_resume_checkpoint(cfg)
    assert "\n" not in str(e.value) and "trainer.resume_mode=disable" in str(e.value)
    assert len(capsys.readouterr().err.splitlines()) == 2  # one warning per checkpoint skipped
    assert complete_steps(root) == [1, 2]


def test_a_damaged_resume_path_is_a_one_line_error_naming_the_file(tmp_path):
    _, root = saved(tmp_path, 1, 2)
    flip_a_byte(root / "global_step_2" / "trainer_state.json")
    cfg = config(tmp_path, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={root / 'global_step_2'}")
    with pytest.raises(ConfigError, match=rf"resume_from_path={root / 'global_step_2'} is damaged: trainer_state.json "
                                          r"fails its CRC-32 check.*global_step_1") as e:
        find_resume_checkpoint(cfg)
    assert "\n" not in str(e.value)


def test_after_a_fallback_the_next_save_is_what_resumes(tmp_path, capsys):
    """Pruning never removes the checkpoint just saved, which verifies: the run resumed from an older checkpoint
    always leaves one to resume from, whatever the damaged one counts for max_ckpt_to_keep."""
    cfg, root = saved(tmp_path, 2, 4, extra=["trainer.max_ckpt_to_keep=2"])
    truncate(root / "global_step_4" / "actor" / "role.json")
    assert find_resume_checkpoint(cfg) == root / "global_step_2"
    assert "global_step_4" in one_warning(capsys)
    checkpointer(cfg)[0].save(3)
    assert complete_steps(root) == [3, 4]
    assert find_resume_checkpoint(cfg) == root / "global_step_3"
    assert "global_step_4" in one_warning(capsys)
