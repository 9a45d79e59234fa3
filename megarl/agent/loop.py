"""The agent loop (`rollout.multi_turn`): each trajectory alternates the model's turns with the results of the tools
it calls, token in and token out.

A trajectory's response is the engine's ids of every turn with the tool messages' ids between them (rendered by the
chat template, megarl/agent/messages.py): no model token is ever decoded and encoded again, so the ids trained on are
the ids sampled. `loss_mask` is 1 on the model's tokens and 0 on the tool tokens, whose log-probs are 0: they carry
no loss, no KL, no entropy and no weight in the log-prob gate. A turn ends at the model's end of turn or at a complete
call; the trajectory ends on a turn without a call (`answer`), at `max_assistant_turns` (`max_turns`), or when the
response's budget is spent (`max_tokens`: data.max_response_length, and prompt + response ≤ max_total_tokens); a tool
message that would leave no room for another turn is not added. So a trajectory ends with a model turn, whose request
held every token before it: with the engine's routing recorded (router replay), that turn's routing covers the
trajectory's tokens but its last, tool tokens included, as a single-turn response's covers its own.

Every trajectory is a coroutine of its own on the engine's event loop (`RolloutEngine.run_async`), so one
trajectory's tool calls run while the others generate, in sync and async modes alike.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import AsyncIterator, Sequence

from megarl.agent.calls import CALL_PARSERS, CallError, ToolCall
from megarl.agent.messages import ToolMessages
from megarl.agent.tools import Tool
from megarl.config.schema import MultiTurnConfig
from megarl.rollout.base import AgentStats, OnResponse, Response, RolloutEngine, SamplingParams

TRAJECTORY_SEED_STRIDE = 1009  # a trajectory's turns are seeded seed, seed + 1, ...; trajectories stride apart


class ToolRuns:
    """One `generate` call's tool calls: at most `workers` at once (a call's timeout runs from its start, not from its
    wait for a free thread), and the wall time with at least one running (`timing_s/tools`: calls that overlap count
    once). Made inside the event loop it serves."""

    def __init__(self, workers: int):
        self.slots = asyncio.Semaphore(workers)
        self.running, self.wall_s, self._since = 0, 0.0, 0.0

    @asynccontextmanager
    async def call(self) -> AsyncIterator[None]:
        async with self.slots:
            if not self.running:
                self._since = time.perf_counter()
            self.running += 1
            try:
                yield
            finally:
                self.running -= 1
                if not self.running:
                    self.wall_s += time.perf_counter() - self._since


@dataclass
class Trajectory:
    """A response being built: ids, log-probs (None where the engine returned none) and loss mask of the model's
    turns and the tool messages between."""

    ids: list[int]
    logprobs: list[float] | None
    mask: list[int]

    def add_turn(self, ids: Sequence[int], logprobs: Sequence[float] | None) -> None:
        """The model's tokens, with their log-probs where its request asked for them."""
        self._add(ids, logprobs, 1)

    def add_tool(self, ids: Sequence[int]) -> None:
        self._add(ids, [0.0] * len(ids), 0)

    def _add(self, ids: Sequence[int], logprobs: Sequence[float] | None, trained: int) -> None:
        self.ids += ids
        self.logprobs = None if self.logprobs is None or logprobs is None else self.logprobs + list(logprobs)
        self.mask += [trained] * len(ids)


class AgentLoop:
    def __init__(self, tokenizer, multi_turn: MultiTurnConfig, tools: dict[str, Tool], max_response_length: int,
                 max_total_tokens: int, workers: int):
        self.tokenizer, self.config, self.tools = tokenizer, multi_turn, tools
        self.max_response_length, self.max_total_tokens = max_response_length, max_total_tokens
        self.parser = CALL_PARSERS.get(multi_turn.format)()
        self.messages = ToolMessages(tokenizer)
        end_of_call = tokenizer.encode(self.parser.end_of_call, add_special_tokens=False)
        # A turn stops at a complete call where the call's end is one token; else it runs to the end of turn.
        self.end_of_call_ids = tuple(end_of_call) if len(end_of_call) == 1 else ()
        self.workers = workers
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="megarl-tool")

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)  # a tool thread past its timeout is not waited for

    def generate(self, engine: RolloutEngine, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 on_response: OnResponse | None = None) -> list[list[Response]]:
        """`params.n` trajectories per prompt on `engine` (its owner), as `RolloutEngine.generate` returns responses
        (with `on_response` as each trajectory ends)."""
        n = params.n

        async def one(i: int, k: int, runs: ToolRuns) -> Response:
            seed = None if params.seed is None else params.seed + TRAJECTORY_SEED_STRIDE * (i * n + k)
            response = await self._trajectory(engine, prompts[i], replace(params, n=1, seed=seed), runs)
            if on_response is not None:
                on_response(i, k, response)
            return response

        async def every() -> list[Response]:
            runs = ToolRuns(self.workers)
            flat = await asyncio.gather(*(one(i, k, runs) for i in range(len(prompts)) for k in range(n)))
            for response in flat:
                assert response.agent is not None  # every trajectory's
                response.agent.engine_tool_wall_s = runs.wall_s
            return list(flat)

        flat = engine.run_async(every())
        return [flat[i * n:(i + 1) * n] for i in range(len(prompts))]

    async def _trajectory(self, engine: RolloutEngine, prompt: Sequence[int], params: SamplingParams,
                          runs: ToolRuns) -> Response:
        built, stats = Trajectory([], [], []), AgentStats()
        budget = min(self.max_response_length, self.max_total_tokens - len(prompt))
        stops = tuple(params.stop_token_ids) + self.end_of_call_ids
        finish, routing = "max_tokens", None
        for turn in range(self.config.max_assistant_turns):
            room = budget - len(built.ids)
            if room <= 0:
                break
            seed = None if params.seed is None else params.seed + turn
            out = await engine.generate_one(
                list(prompt) + built.ids, replace(params, max_new_tokens=room, stop_token_ids=stops, seed=seed))
            built.add_turn(out.token_ids, out.logprobs)
            routing = out.routed_experts
            stats.assistant_turns += 1
            calls = self.parser.parse(self.tokenizer.decode(out.token_ids, skip_special_tokens=False)).calls
            if not calls:
                finish = "answer" if out.finish_reason == "stop" else "max_tokens"
                break
            if turn + 1 == self.config.max_assistant_turns:
                finish = "max_turns"
                break
            results = [await self._run(call, stats, runs) for call in calls]
            tool_ids = self.messages.ids(results, turn_end=self._turn_end(out))
            if len(built.ids) + len(tool_ids) >= budget:  # no room left for the model to read it and answer
                break
            built.add_tool(tool_ids)
        return Response(built.ids, built.logprobs, finish, loss_mask=built.mask, agent=stats, routed_experts=routing)

    def _turn_end(self, out: Response) -> str:
        """The text of the end-of-turn token the turn stopped at ('' when it stopped at a call or ran out)."""
        if out.finish_reason != "stop" or not out.token_ids or out.token_ids[-1] in self.end_of_call_ids:
            return ""
        return self.tokenizer.decode(out.token_ids[-1:], skip_special_tokens=False)

    async def _run(self, call: ToolCall | CallError, stats: AgentStats, runs: ToolRuns) -> str:
        """What the model reads back from one call: the tool's output (cut to max_tool_response_length), or an error
        that says what went wrong. Nothing here raises: a bad call is the model's mistake, counted."""
        if isinstance(call, CallError):
            stats.tool_errors += 1
            return f"Error: {call.message}"
        tool = self.tools.get(call.name)
        if tool is None:
            stats.tool_errors += 1
            return f"Error: there is no tool {call.name!r}; the tools are {sorted(self.tools)}"
        stats.tool_calls += 1
        async with runs.call():
            return await self._run_tool(tool, call, stats)

    async def _run_tool(self, tool: Tool, call: ToolCall, stats: AgentStats) -> str:
        timeout, start = self.config.tool_timeout_s, time.perf_counter()
        try:
            output = await asyncio.wait_for(
                asyncio.get_running_loop().run_in_executor(self.pool, tool.call, call.arguments), timeout)
            text = output.text
            stats.tool_timeouts += output.timed_out
        except asyncio.TimeoutError:
            stats.tool_timeouts += 1
            text = f"Error: the {call.name} tool did not answer within {timeout:g} s"
        except Exception as e:  # the tool's failure is the call's result
            stats.tool_errors += 1
            text = f"Error: {type(e).__name__}: {e}"
        stats.tool_seconds += time.perf_counter() - start
        return _cut(text, self.config.max_tool_response_length)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters cut]"
