"""Model-written programs, run walled off and under limits: the code reward's tests (and, next, the agent loop's
`python` tool)."""

from megarl.sandbox.backends import SandboxUnavailable
from megarl.sandbox.runner import Program, RunResult, Sandbox

__all__ = ["Program", "RunResult", "Sandbox", "SandboxUnavailable"]
