"""Multi-turn, tool-using rollouts (`rollout.multi_turn`, docs/agents.md): the agent loop, the tool-call formats, the
tools."""

from megarl.agent.calls import CALL_PARSERS, CallError, ParsedTurn, ToolCall
from megarl.agent.loop import AgentLoop
from megarl.agent.tools import TOOLS, Tool, ToolContext, ToolOutput, build_tools, tool_class

__all__ = ["AgentLoop", "CALL_PARSERS", "CallError", "ParsedTurn", "TOOLS", "Tool", "ToolCall", "ToolContext",
           "ToolOutput", "build_tools", "tool_class"]
