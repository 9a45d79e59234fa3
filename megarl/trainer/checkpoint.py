"""Training checkpoints of the RL loop in verl's layout: saved every `trainer.save_freq` steps and at the last,
committed atomically, pruned to `trainer.max_ckpt_to_keep`, found again by `trainer.resume_mode`.

    {trainer.output_dir}/checkpoints/
        latest_checkpointed_iteration.txt    the last committed step (for verl's tools and people)
        global_step_{k}/
            actor/    critic/ (PPO)     each role's weights, optimizer, LR scheduler and per-rank RNG states
                                        (megarl/models/checkpoint.py; `megarl export` reads these directories)
            trainer_state.json          the step, the data loader's position, the KL controller, the driver's RNG
            manifest.json               every other file's size and CRC-32, written last (ckpt_manifest.py)

A checkpoint is written into `global_step_{k}.partial` and renamed once every rank has finished and the driver
has written its trainer state and manifest, so a directory named `global_step_{k}` holding trainer_state.json is
complete; a crash mid-write leaves the .partial, which resume ignores and the next save removes. A complete
checkpoint can still be damaged afterwards (a full disk, a copy cut short): resume checks it against its manifest
first, and `auto` falls back to the newest one that verifies. One process (the Ray driver, or rank 0 under torchrun)
creates, renames and deletes directories; the workers only write inside them. The output directory must be on a
filesystem every worker process sees.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from megarl import rng
from megarl.config import ConfigError
from megarl.config.schema import MegaRLConfig
from megarl.trainer.scaffold import tell
from megarl.trainer.ckpt_manifest import MANIFEST, build_manifest, verify

TRACKER = "latest_checkpointed_iteration.txt"
TRAINER_STATE = "trainer_state.json"
PARTIAL, TRASH = ".partial", ".trash"
_STEP_DIR = re.compile(r"global_step_(\d+)")
# role.json's layout names (megarl/models/checkpoint.py) → the megatron keys of a role's section
MESH_KEYS = {"tensor": "tensor_model_parallel_size", "pipeline": "pipeline_model_parallel_size",
             "context": "context_parallel_size"}


def checkpoints_root(cfg: MegaRLConfig) -> Path:
    return Path(cfg.trainer.output_dir).expanduser() / "checkpoints"


def step_dir(root: Path, step: int) -> Path:
    return root / f"global_step_{step}"


def trained_roles(cfg: MegaRLConfig) -> list[str]:
    return ["actor", "critic"] if cfg.use_critic else ["actor"]


def complete_steps(root: Path) -> list[int]:
    """Steps of the complete checkpoints under `root`, oldest first."""
    if not root.is_dir():
        return []
    steps = []
    for path in root.iterdir():
        match = _STEP_DIR.fullmatch(path.name)
        if match and (path / TRAINER_STATE).is_file():
            steps.append(int(match.group(1)))
    return sorted(steps)


def find_resume_checkpoint(cfg: MegaRLConfig) -> Path | None:
    """The checkpoint `trainer.resume_mode` asks for: none (disable, or auto with none saved yet), the newest complete
    one under the output directory that verifies (auto), or `trainer.resume_from_path`. Runs before any worker
    starts, so a wrong path or a damaged checkpoint fails at once, naming the file."""
    mode = cfg.trainer.resume_mode
    if mode == "disable":
        return None
    path = _given_checkpoint(cfg) if mode == "resume_path" else _newest_intact(checkpoints_root(cfg))
    if path is None:
        return None
    missing = [role for role in trained_roles(cfg) if not (path / role / "role.json").is_file()]
    if missing:
        raise ConfigError(f"checkpoint {path} has no {', '.join(missing)} checkpoint, which this recipe trains "
                          f"(algorithm.adv_estimator={cfg.algorithm.adv_estimator}): resume a run of the same recipe, "
                          "or start afresh with trainer.resume_mode=disable")
    check_resume_layout(cfg, path)
    return path


def resume_candidate(cfg: MegaRLConfig) -> Path | None:
    """The checkpoint a launch would resume from if it verifies, found without reading its shards (for `--dry-run`
    and the checks before launch; `find_resume_checkpoint` verifies it, and refuses what is no checkpoint, when the
    run starts). Its trainer state parses: `saved_step` reads it."""
    mode, path = cfg.trainer.resume_mode, None
    if mode == "resume_path" and cfg.trainer.resume_from_path:  # validate.py refuses the mode without a path
        path = Path(cfg.trainer.resume_from_path).expanduser()
    elif mode == "auto":
        steps = complete_steps(checkpoints_root(cfg))
        path = step_dir(checkpoints_root(cfg), steps[-1]) if steps else None
    if path is None:
        return None
    try:
        saved_step(path)
    except (OSError, ValueError, KeyError, TypeError):  # no checkpoint: find_resume_checkpoint says why at start
        return None
    return path


def check_resume_layout(cfg: MegaRLConfig, path: Path) -> None:
    """Each trained role of the checkpoint at `path` was saved at this recipe's tensor, pipeline and context-parallel
    sizes: the optimizer state (megatron's dp_reshardable format, megarl/models/checkpoint.py) loads at no others."""
    for role in trained_roles(cfg):
        saved = _saved_layout(path / role / "role.json")
        megatron = getattr(cfg, role).megatron
        differ = {f"{role}.megatron.{key}": (saved[dim], getattr(megatron, key)) for dim, key in MESH_KEYS.items()
                  if saved.get(dim, getattr(megatron, key)) != getattr(megatron, key)}
        if differ:
            raise ConfigError(
                f"checkpoint {path} cannot resume at {', '.join(f'{k}={new}' for k, (_, new) in differ.items())}: its "
                f"{role} was saved at {', '.join(str(old) for old, _ in differ.values())}, and its optimizer state "
                "(megatron's dp_reshardable format) loads only at the tensor, pipeline and context-parallel sizes it "
                f"was saved with (the data-parallel size may change). Set "
                f"{', '.join(f'{k}={old}' for k, (old, _) in differ.items())} to resume, or carry its weights over: "
                f"`megarl export --checkpoint {path / role} --out HF_DIR`, then model.path=HF_DIR in a new "
                "trainer.output_dir")


def _saved_layout(meta: Path) -> dict[str, int]:
    """The parallel sizes in a role's role.json; none where it cannot be read (the manifest check names that)."""
    try:
        return json.loads(meta.read_text()).get("layout", {})
    except (OSError, ValueError, AttributeError):
        return {}


def _given_checkpoint(cfg: MegaRLConfig) -> Path:
    """`trainer.resume_from_path`, once it is known to be a complete checkpoint that verifies."""
    path = Path(cfg.trainer.resume_from_path).expanduser()  # type: ignore[arg-type]  # validate.py requires it
    if not path.is_dir():
        raise ConfigError(f"trainer.resume_from_path={path} does not exist")
    others = ", ".join(step_dir(path.parent, s).name for s in complete_steps(path.parent)
                       if step_dir(path.parent, s) != path) or "none"
    if path.name.endswith(PARTIAL) or not (path / TRAINER_STATE).is_file():
        raise ConfigError(
            f"trainer.resume_from_path={path} is not a complete checkpoint (no {TRAINER_STATE}): an interrupted save "
            f"leaves global_step_K{PARTIAL} behind. Point it at a global_step_K directory; complete ones in "
            f"{path.parent}: {others}"
        )
    problem = _damage(path)
    if problem:
        raise ConfigError(f"trainer.resume_from_path={path} is damaged: {problem}. Point it at an earlier "
                          f"global_step_K (complete ones in {path.parent}: {others}), or set trainer.resume_mode=auto "
                          "to resume from the newest checkpoint under trainer.output_dir that verifies")
    return path


def _newest_intact(root: Path) -> Path | None:
    """The newest complete checkpoint under `root` that verifies, with a warning for each newer one skipped; None
    when there is none. When every one is damaged the run stops: starting afresh would throw the run's progress
    away (and pruning would then delete the damaged checkpoints, which a backup may repair), while an error makes a
    requeued job fail in seconds, before any worker starts, with the reason."""
    # The newest complete directories, not the tracker's step: a crash between a checkpoint's rename and the
    # tracker's update leaves the tracker one checkpoint behind.
    skipped = []
    for step in reversed(complete_steps(root)):
        path = step_dir(root, step)
        problem = _damage(path)
        if problem is None:
            return path
        tell(f"warning: skipping damaged checkpoint {path}: {problem}; trying the one before (it stays in place "
              f"until this run saves step {step} again or prunes it)", sys.stderr)
        skipped.append(path.name)
    if skipped:
        raise ConfigError(f"no checkpoint under {root} verifies ({', '.join(skipped)}: each damaged file is named "
                          "above): restore the files from a copy, or start afresh in a new trainer.output_dir (or "
                          "here with trainer.resume_mode=disable, whose saves replace and prune these)")
    return None


def _damage(path: Path) -> str | None:
    """What makes the checkpoint at `path` unusable (a file, and how it is damaged), or None: its files against
    its manifest, then its trainer state, which the driver reads itself."""
    start = time.perf_counter()
    verdict = verify(path)
    if verdict.problem:
        return verdict.problem
    try:
        json.loads((path / TRAINER_STATE).read_text())
    except (OSError, ValueError) as e:
        return f"{TRAINER_STATE} cannot be read as JSON ({e})"
    if verdict.files:
        tell(f"verified {path}: {verdict.files} files, {verdict.size / 1e6:.1f} MB in "
              f"{time.perf_counter() - start:.2f} s")
    else:
        tell(f"{path} has no {MANIFEST} (saved before megarl wrote them, or lost since): its files are unverified")
    return None


def saved_for_resume(cfg: MegaRLConfig) -> str:
    """What a run stopped now leaves to resume from, and how (the end of its last line)."""
    root = checkpoints_root(cfg)
    steps = complete_steps(root)
    if not steps:
        return (f"no checkpoint was saved yet (trainer.save_freq={cfg.trainer.save_freq}): starting the same command "
                "again starts afresh")
    how = ("starting the same command again resumes from it" if cfg.trainer.resume_mode == "auto" else
           "the same command with trainer.resume_mode=auto resumes from it")
    return f"the last checkpoint is {step_dir(root, steps[-1])}: {how}"


def saved_step(path: Path) -> int:
    """The step the (verified) checkpoint at `path` was saved after."""
    return json.loads((path / TRAINER_STATE).read_text())["step"]


class Checkpointer:
    """Saves the run and restores it: the trained roles through their workers, the driver's own state here.

    `roles`: role name → handle (None for a role this recipe lacks) with `save_checkpoint`/`load_checkpoint` worker
    methods; `state`: name → object with `state_dict()`/`load_state_dict()` (the data loader, the KL controller)."""

    def __init__(self, cfg: MegaRLConfig, is_driver: bool, roles: dict, state: dict):
        self.root, self.is_driver = checkpoints_root(cfg), is_driver
        self.save_freq, self.keep = cfg.trainer.save_freq, cfg.trainer.max_ckpt_to_keep
        self.roles = {name: handle for name, handle in roles.items() if handle is not None}
        self.state = state

    def load(self, path: Path | None) -> int:
        """Restore the checkpoint at `path` (None: a fresh run); returns the step it was saved after."""
        if path is None:
            return 0
        saved = json.loads((path / TRAINER_STATE).read_text())
        # The driver's RNG first: under torchrun the driver shares each rank's process, whose generators the roles
        # then restore to that rank's own states.
        rng.restore(saved["rng"])
        for name, obj in self.state.items():
            obj.load_state_dict(saved[name])
        for name, role in self.roles.items():
            role.load_checkpoint(str(path / name))
        if self.is_driver:
            print(f"resumed from {path} (step {saved['step']})", flush=True)
        return saved["step"]

    def maybe_save(self, step: int, last_step: int) -> bool:
        """Save after `step` when trainer.save_freq says so; whether it saved."""
        if self.save_freq > 0 and (step % self.save_freq == 0 or step == last_step):
            self.save(step)
            return True
        return False

    def save(self, step: int) -> None:
        start, driver_rng = time.perf_counter(), rng.capture()  # captured where the roles capture theirs
        final = step_dir(self.root, step)
        partial = final.with_name(final.name + PARTIAL)
        if self.is_driver:
            _remove(partial)
            partial.mkdir(parents=True)
        required = [TRAINER_STATE]
        for name, role in self.roles.items():  # each returns when every rank of the role has written
            required += [f"{name}/{file}" for file in role.save_checkpoint(str(partial / name))]
        if not self.is_driver:
            return
        state = {"step": step, "rng": driver_rng, **{name: obj.state_dict() for name, obj in self.state.items()}}
        _write_durably(partial / TRAINER_STATE, json.dumps(state))
        manifest_start = time.perf_counter()  # after the roles' barriers: every rank's files are written
        _write_durably(partial / MANIFEST, build_manifest(partial, required))
        manifest_s = time.perf_counter() - manifest_start
        replaced = final.with_name(final.name + TRASH)
        if final.exists():  # saved by an earlier run that this one resumed from before this step
            shutil.rmtree(replaced, ignore_errors=True)
            os.rename(final, replaced)
        os.rename(partial, final)
        shutil.rmtree(replaced, ignore_errors=True)
        _write_durably(self.root / TRACKER, str(step))
        if self.keep:  # the newest others, and never this one (a resumed older checkpoint's run may have left newer)
            others = [s for s in complete_steps(self.root) if s != step]
            for old in others[: max(len(others) - (self.keep - 1), 0)]:
                _remove(step_dir(self.root, old))
        for leftover in [*self.root.glob(f"*{PARTIAL}"), *self.root.glob(f"*{TRASH}")]:  # of crashed saves
            shutil.rmtree(leftover, ignore_errors=True)
        print(f"saved checkpoint {final} in {time.perf_counter() - start:.1f} s (its manifest: {manifest_s:.2f} s)",
              flush=True)


def _remove(path: Path) -> None:
    """Delete a directory, first renaming it out of the checkpoint name space so that a crash mid-delete cannot
    leave a directory that looks complete."""
    if not path.exists():
        return
    trash = path.with_name(path.name + TRASH)
    shutil.rmtree(trash, ignore_errors=True)
    os.rename(path, trash)
    shutil.rmtree(trash)


def _write_durably(path: Path, text: str) -> None:
    """Replace `path` atomically with `text`, on disk before it is visible."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
