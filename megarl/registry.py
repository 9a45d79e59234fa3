"""Name → object registries, so a recipe can name an estimator, a loss or a reward by string."""

from __future__ import annotations

import difflib
from typing import Callable, Generic, Iterable, TypeVar

T = TypeVar("T")


class UnknownNameError(ValueError):
    """A recipe or call named something no registry entry answers to."""


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """A ' Did you mean ...?' suffix for `name`, or '' when nothing is close."""
    close = difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


class Registry(Generic[T]):
    """A named collection; `kind` reads in error messages ("advantage estimator", "data_source")."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, *names: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            for name in names:
                if name in self._entries:
                    raise ValueError(f"{self.kind} {name!r} is registered twice")
                self._entries[name] = obj
            return obj

        return decorator

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; known: {', '.join(sorted(self._entries))}."
                + did_you_mean(name, self._entries)
            ) from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries
