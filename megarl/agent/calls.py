"""How a model writes a tool call, read from the text of its turn: a registry of formats (`rollout.multi_turn.format`).

A parser reads calls only; the turn's token ids are never re-encoded from the text it reads (megarl/agent/loop.py).
A call that does not parse is a `CallError`, which the loop shows the model as the call's result and counts, never an
exception of the run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

from megarl.registry import Registry


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class CallError:
    message: str  # shown to the model as the call's result


@dataclass(frozen=True)
class ParsedTurn:
    calls: list[ToolCall | CallError]  # in the order the model wrote them

    @property
    def wants_tools(self) -> bool:
        return bool(self.calls)


class CallParser(Protocol):
    end_of_call: str  # the text that completes a call: a turn may stop there (a stop token where it is one token)

    def parse(self, text: str) -> ParsedTurn: ...


CALL_PARSERS: Registry[type] = Registry("tool-call format")


@CALL_PARSERS.register("hermes")
class HermesParser:
    """Qwen2.5's and Qwen3's format (verl's "hermes"): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`,
    `arguments` an object or a JSON string of one."""

    start_of_call, end_of_call = "<tool_call>", "</tool_call>"
    _call = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)

    def parse(self, text: str) -> ParsedTurn:
        calls: list[ToolCall | CallError] = []
        for match in self._call.finditer(text):
            if not match.group(2):
                calls.append(CallError(f"the tool call was not closed with {self.end_of_call}"))
            else:
                calls.append(_read_call(match.group(1).strip()))
        return ParsedTurn(calls)


def _read_call(body: str) -> ToolCall | CallError:
    try:
        call = json.loads(body)
    except json.JSONDecodeError as e:
        return CallError(f"the tool call is not valid JSON ({e.msg} at character {e.pos})")
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return CallError('the tool call needs a "name" (a string) and "arguments" (an object)')
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return CallError('the tool call\'s "arguments" is a string that is not a JSON object')
    if not isinstance(arguments, dict):
        return CallError('the tool call\'s "arguments" must be an object')
    return ToolCall(call["name"], arguments)
