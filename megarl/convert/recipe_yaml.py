"""A recipe's dotted lines written as nested YAML in the schema's order, each with its comment."""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

import yaml

from megarl.config.loader import RL_RECIPE, RecipeSchema


class CommentedValue(Protocol):
    value: Any
    comment: str


def flow(value: Any) -> str:
    """`value` as one line of YAML: 1.0e-06, true, null, [console, wandb], 'a: b'."""
    return yaml.safe_dump(value, default_flow_style=True, width=1 << 20).removesuffix("\n...\n").strip()


def recipe_yaml(lines: Mapping[str, CommentedValue], header: Sequence[str] = (),
                schema: RecipeSchema = RL_RECIPE) -> str:
    """Nested YAML of `lines` (dotted key → value and comment), sections and keys in `schema`'s order."""
    order = {key: i for i, key in enumerate(schema.keys)}

    def position(key: str) -> tuple[int, str]:
        parent = schema.open_parent(key)
        return (order[parent], key) if parent is not None else (order[key], "")

    out = [f"# {line}" for line in header]
    open_path: list[str] = []
    for key in sorted(lines, key=position):
        *parents, leaf = key.split(".")
        shared = 0
        while shared < min(len(parents), len(open_path)) and parents[shared] == open_path[shared]:
            shared += 1
        out += [f"{'  ' * depth}{name}:" for depth, name in enumerate(parents[shared:], start=shared)]
        open_path = parents
        line = lines[key]
        comment = f"  # {line.comment}" if line.comment else ""
        out.append(f"{'  ' * len(parents)}{leaf}: {flow(line.value)}{comment}")
    return "\n".join(out) + "\n"
