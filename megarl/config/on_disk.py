"""What a run needs on disk, checked apart from the recipe's own consistency (megarl/config/validate.py) so that a
recipe loads, and a dry run reports, without the model and data being there yet."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from megarl.config.errors import ConfigError
from megarl.data.dataset import DataError


def check_inputs_exist(models: list[tuple[str, str | None]], train_files: list[str], val_files: list[str],
                       check_file: Callable[[Path], None]) -> None:
    """What a run needs on disk, checked apart from `validate_config` so that a recipe loads without it: the
    model directories (config key, path) and the data files, each of which `check_file` reads (raising
    DataError when it cannot feed the run)."""
    problems = []
    for key, path in models:
        if not path:
            problems.append(f"{key} is not set: point it at a local HF checkpoint directory")
        elif not (Path(path).expanduser() / "config.json").is_file():
            problems.append(
                f"{key}={path} is not a HF checkpoint directory (no config.json there); nothing is downloaded, "
                "so save or copy the model there first"
            )
    if not train_files:
        problems.append("data.train_files is empty: set it to your parquet file(s), e.g. from `megarl preprocess`")
    for key, files in (("data.train_files", train_files), ("data.val_files", val_files)):
        problems += [f"{key}: {problem}" for problem in _data_file_problems(files, check_file)]
    if problems:
        raise ConfigError(problems)


def _data_file_problems(files: list[str], check_file: Callable[[Path], None]) -> list[str]:
    problems = []
    for file in files:
        path = Path(file).expanduser()
        if path.is_dir():
            found = ", ".join(str(p) for p in sorted(path.glob("*.parquet"))) or "it holds none"
            problems.append(f"{file} is a directory: list its parquet files ({found})")
        elif not path.is_file():
            problems.append(f"{file} does not exist (make it with `megarl preprocess`)")
        else:
            try:
                check_file(path)
            except DataError as e:
                problems.append(str(e))
    return problems
