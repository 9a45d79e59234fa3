"""The tools a model may call in the agent loop: a registry (`rollout.multi_turn.tools`), and user tools named as
'path/to/file.py:Class' or 'package.module:Class' (subclasses of `Tool`).

A tool takes the call's arguments and returns the text the model reads next. It runs in a thread of the loop's pool,
abandoned after `rollout.multi_turn.tool_timeout_s` (docs/agents.md); the `python` tool runs the snippet in the
sandbox (megarl/sandbox), whose own limits end it sooner.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from megarl.registry import Registry
from megarl.sandbox import Program, Sandbox


@dataclass(frozen=True)
class ToolOutput:
    text: str
    timed_out: bool = False  # the tool's own limit ended it (the python tool's wall or CPU time)


@dataclass
class ToolContext:
    """What a tool may use: the sandbox of `reward.sandbox`, made by the first tool that asks, when the tools are built
    (a run without a tool that runs programs never probes for one)."""

    sandbox_config: Any  # a SandboxConfig
    _sandbox: Optional[Sandbox] = None

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = Sandbox(self.sandbox_config)
        return self._sandbox

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()


class Tool(ABC):
    name: str
    description: str
    parameters: dict[str, Any]  # the arguments' JSON schema, as the chat template shows it to the model

    def __init__(self, context: ToolContext):
        self.context = context

    @classmethod
    def schema(cls) -> dict[str, Any]:
        """The OpenAI-style function schema chat templates render (`tools=` of apply_chat_template)."""
        return {"type": "function",
                "function": {"name": cls.name, "description": cls.description, "parameters": cls.parameters}}

    @abstractmethod
    def call(self, arguments: dict[str, Any]) -> ToolOutput:
        """The call's result; an exception is shown to the model as an error (tool/errors), not raised."""


TOOLS: Registry[type[Tool]] = Registry("tool")


@TOOLS.register("python")
class PythonTool(Tool):
    name = "python"
    description = "Run a Python program and read what it prints (stdout, then stderr)."
    parameters = {"type": "object", "properties": {"code": {"type": "string", "description": "the program"}},
                  "required": ["code"]}

    def __init__(self, context: ToolContext):
        super().__init__(context)
        self.sandbox = context.sandbox  # probed now: a host that cannot run programs is refused before any step

    def call(self, arguments: dict[str, Any]) -> ToolOutput:
        code = arguments.get("code")
        if not isinstance(code, str):
            raise ValueError('the python tool needs "code", a string')
        result = self.sandbox.run(Program(code))
        text = result.stdout + (result.stderr if result.stderr else "")
        if result.limit:
            text += f"\n[stopped: the program exceeded its {result.limit} limit]"
        return ToolOutput(text.strip(), timed_out=result.timed_out)


def tool_class(name: str) -> type[Tool]:
    """A registered tool, or user code as 'path/to/file.py:Class' or 'package.module:Class' (a Tool subclass)."""
    from megarl.plugins import registered_or_user_class

    return registered_or_user_class(name, TOOLS, "rollout.multi_turn.tools", Tool, "megarl.agent.Tool")


def build_tools(names: Sequence[str], context: ToolContext) -> dict[str, Tool]:
    """The recipe's tools by the name the model calls them."""
    tools = [tool_class(name)(context) for name in names]
    by_name = {tool.name: tool for tool in tools}
    if len(by_name) < len(tools):
        raise ValueError(f"rollout.multi_turn.tools={list(names)}: two tools share a name")
    return by_name


def tool_schemas(multi_turn: Any) -> list[dict[str, Any]]:
    """The schemas of a `rollout.multi_turn` section's tools, which the prompts show the model (none without it)."""
    return [tool_class(name).schema() for name in multi_turn.tools] if multi_turn.enable else []
