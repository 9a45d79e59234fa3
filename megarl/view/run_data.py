"""Read a training run's output directory (metrics.jsonl, config.yaml, the train and validation sample files) into
one JSON-able dict: what the viewer page draws, rebuilt on every request of a live run."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

# (panel id, title, exact metric names, metric-name prefixes): a panel is drawn when any of its metrics exist.
PANELS = (
    ("reward", "Reward", ("critic/score/mean", "critic/rewards/mean"), ("val-core/",)),
    ("kl", "KL", ("actor/ppo_kl", "actor/kl_loss", "actor/reward_kl_penalty"), ()),
    ("entropy", "Entropy", ("actor/entropy",), ()),
    ("response_length", "Response length", ("response_length/mean", "response_length/max"), ()),
    ("grad_norm", "Grad norm", ("actor/grad_norm", "critic/grad_norm"), ()),
    ("timing", "Timings (s)", (), ("timing_s/",)),
    ("memory", "Memory (GB)", ("perf/max_memory_allocated_gb",), ("memory/",)),
    ("health", "Health (1 = breach)", (), ("health/",)),
)
HEADER_METRICS = ("critic/score/mean", "response_length/mean", "actor/entropy", "actor/ppo_kl", "timing_s/step")
# The per-token heat strips of a training sample: (key, label, how to compute it from the sample, or None).
STRIPS: tuple[tuple[str, str, Callable[[dict], list | None]], ...] = (
    ("values", "values (critic)", lambda s: s.get("values")),
    ("advantages", "advantages", lambda s: s.get("advantages")),
    ("returns", "returns", lambda s: s.get("returns")),
    ("log_ratio", "log-prob ratio trainer/rollout (old − rollout)",
     lambda s: _difference(s.get("old_log_probs"), s.get("rollout_log_probs"))),
    ("ref_kl", "KL to reference (old − ref log-prob)",
     lambda s: _difference(s.get("old_log_probs"), s.get("ref_log_prob"))),
    ("entropy", "entropy", lambda s: s.get("entropy")),
)
SAMPLE_FIELDS = ("index", "uid", "data_source", "input", "output", "gts", "score", "acc", "reward", "finish_reason",
                 "response_length", "rm_score", "judge_score", "rule_score", "turns", "agent", "judge")


class RunDirError(Exception):
    """A run directory the viewer cannot read; the message says what to pass instead."""


def read_run(run_dir: str | Path) -> dict[str, Any]:
    """Everything the page shows, from `run_dir` as it is now (a live run's files may be mid-write)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"RUN_DIR {run_dir} does not exist: pass a training run's output directory "
                          "(trainer.output_dir, the one holding metrics.jsonl)")
    metrics_path = run_dir / "metrics.jsonl"
    if not metrics_path.is_file():
        raise RunDirError(f"{run_dir} has no metrics.jsonl: pass a training run's output directory "
                          "(trainer.output_dir); the trainer writes metrics.jsonl there from the first step on")
    config = _read_config(run_dir)
    metrics = _merge_steps(_read_jsonl(metrics_path))
    trainer = config.get("trainer") or {}
    train_dir = _samples_dir(run_dir, trainer.get("rollout_data_dir"), "train")
    val_dir = _samples_dir(run_dir, trainer.get("validation_data_dir"), "val")
    return _finite({
        "run_dir": str(run_dir.resolve()),
        "experiment_name": trainer.get("experiment_name") or run_dir.resolve().name,
        "metrics": metrics,
        "panels": curve_panels(metrics),
        "header": header_metrics(metrics),
        "train": _read_samples(train_dir, _train_sample),
        "val": _read_samples(val_dir, _val_sample),
    })


def curve_panels(metrics: list[dict]) -> list[dict]:
    """The PANELS whose metrics the run logged, each with its metric names in a stable order."""
    names = sorted({name for row in metrics for name in row if name != "step"})
    panels = []
    for panel_id, title, exact, prefixes in PANELS:
        chosen = [name for name in exact if name in names]
        chosen += [name for name in names if name.startswith(prefixes) and name not in chosen] if prefixes else []
        if chosen:
            panels.append({"id": panel_id, "title": title, "metrics": chosen})
    return panels


def header_metrics(metrics: list[dict]) -> dict[str, Any]:
    """The last step, its headline metrics and the latest validation scores: the page's one-line summary."""
    last: dict[str, float] = {}
    for row in metrics:
        last.update({name: value for name, value in row.items()
                     if name in HEADER_METRICS or name.startswith("val-core/")})
    return {"last_step": metrics[-1]["step"] if metrics else None, "metrics": last}


def _read_config(run_dir: Path) -> dict:
    path = run_dir / "config.yaml"
    if not path.is_file():
        return {}
    from omegaconf import OmegaConf

    try:
        config = OmegaConf.load(path)
    except Exception as e:  # the YAML parser's errors have no common base class
        raise RunDirError(f"{path} is not readable YAML ({e}): fix or remove it") from e
    try:
        resolved = OmegaConf.to_container(config, resolve=True)
    except Exception:  # an interpolation of a resolver only the trainer registers: the values as written
        resolved = OmegaConf.to_container(config, resolve=False)
    if not isinstance(resolved, dict):
        raise RunDirError(f"{path} is not a recipe (a mapping with a trainer section): fix or remove it")
    return resolved


def _samples_dir(run_dir: Path, configured: str | None, default: str) -> Path:
    """`configured` as the trainer wrote it: absolute, or relative to the directory it was started in (assumed to
    be ours) or, failing that, to the run directory."""
    if not configured:
        return run_dir / "samples" / default
    path = Path(configured)
    if path.is_absolute() or path.is_dir():
        return path
    return run_dir / path


def _read_jsonl(path: Path) -> list[dict]:
    """The file's objects; an unfinished last line is a write in progress and is left for the next read."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if number == len(lines):
                break
            raise RunDirError(f"{path}:{number} is not a JSON object ({e}): fix or remove that line") from e
    return rows


def _merge_steps(rows: list[dict]) -> list[dict]:
    """One row per step, in step order; a step logged twice (validation apart from training) keeps both's metrics."""
    by_step: dict[int, dict] = {}
    for row in rows:
        if isinstance(row.get("step"), int):
            by_step.setdefault(row["step"], {}).update(row)
    return [by_step[step] for step in sorted(by_step)]


def _read_samples(directory: Path, normalize: Callable[[dict], dict]) -> dict[str, Any]:
    steps = []
    if directory.is_dir():
        for path in directory.glob("*.jsonl"):
            if path.stem.isdigit():
                samples = sorted(_read_jsonl(path), key=lambda s: s.get("index", 0))
                steps.append({"step": int(path.stem), "samples": [normalize(s) for s in samples]})
    steps.sort(key=lambda entry: entry["step"])
    return {"dir": str(directory), "found": directory.is_dir(), "steps": steps}


def _val_sample(raw: dict) -> dict:
    sample = {name: raw.get(name) for name in SAMPLE_FIELDS if name != "reward"}
    sample["answer"] = _answer_span(raw.get("output") or "", raw.get("answer"))
    return sample


def _train_sample(raw: dict) -> dict:
    sample = {name: raw.get(name) for name in SAMPLE_FIELDS}
    sample["answer"] = _answer_span(raw.get("output") or "", raw.get("answer"))
    sample["tokens"] = raw.get("tokens") or []
    sample["strips"] = [{"key": key, "label": label, "values": [_rounded(v) for v in values]}
                        for key, label, compute in STRIPS if (values := compute(raw))]
    return sample


def _answer_span(output: str, answer: dict | None) -> dict | None:
    """The scorer's match as offsets into `output`. Its text may be normalised (`72.0` for `72`), so offsets inside
    `output` are kept as they are; offsets outside it are looked for again as the text's last occurrence."""
    if not answer or not answer.get("text"):
        return None
    text, start, end = str(answer["text"]), answer.get("start"), answer.get("end")
    if isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= len(output):
        return {"text": text, "start": start, "end": end}
    found = output.rfind(text)
    return {"text": text, "start": found, "end": found + len(text)} if found >= 0 else {"text": text}


def _difference(a: list | None, b: list | None) -> list | None:
    if not a or not b:
        return None
    return [x - y if x is not None and y is not None else None for x, y in zip(a, b)]


def _rounded(value: float | None) -> float | None:
    """Four significant digits: per-token strips are most of the page's data, and colors need no more."""
    return None if value is None else float(f"{value:.4g}")


def _finite(value: Any) -> Any:
    """NaN and infinities (a diverged loss) become null: JSON has no such numbers and the browser refuses them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value
