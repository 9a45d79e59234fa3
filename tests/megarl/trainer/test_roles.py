"""The role interfaces the RL loop is typed against: docs/architecture.md's table lists each one's methods and its
implementations, and each implementation has every method of its interface."""

import re

import pytest

from megarl.trainer import recovery, roles, weight_sync
from megarl.workers import groups
from tests.helpers import REPO_ROOT

INTERFACES = [roles.Actor, roles.Reference, roles.Critic, roles.RewardModel, roles.Rollout, roles.WeightSync]


def members(protocol: type) -> set[str]:
    return {name for cls in protocol.__mro__ if getattr(cls, "_is_protocol", False)
            for name in vars(cls) if not name.startswith("_")}


def documented() -> dict[str, tuple[set[str], set[str]]]:
    """docs/architecture.md's interface table: name → (methods, implementations)."""
    rows = {}
    for line in (REPO_ROOT / "docs/architecture.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"`\w+`", cells[0]) and cells[0] != "`interface`":
            rows[cells[0].strip("`")] = (set(re.findall(r"`(\w+)`", cells[1])), set(re.findall(r"`(\w+)`", cells[2])))
    return rows


def test_the_architecture_doc_lists_each_interface_and_its_methods():
    table = documented()
    assert set(table) == {protocol.__name__ for protocol in INTERFACES}
    for protocol in INTERFACES:
        assert table[protocol.__name__][0] == members(protocol), protocol.__name__


@pytest.mark.parametrize("protocol", INTERFACES, ids=lambda p: p.__name__)
def test_each_implementation_has_its_interfaces_methods(protocol):
    modules = (groups, recovery, weight_sync)
    for name in documented()[protocol.__name__][1]:
        implementation = next(getattr(m, name) for m in modules if hasattr(m, name))
        annotated = {n for cls in implementation.__mro__ for n in getattr(cls, "__annotations__", {})}
        assert members(protocol) <= set(dir(implementation)) | annotated, (protocol.__name__, name)
