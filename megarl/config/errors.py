"""The one error a recipe's problems become, for every recipe command and every check."""

from __future__ import annotations

from typing import Sequence


class ConfigError(ValueError):
    """A recipe or override is wrong; the message says which key and how to fix it."""

    def __init__(self, problems: str | Sequence[str]):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__(
            self.problems[0] if len(self.problems) == 1 else "\n  - ".join(["invalid recipe:", *self.problems])
        )
