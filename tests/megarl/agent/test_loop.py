"""The agent loop on a scripted engine (turns fixed in advance, so every case is exact) and on the transformers
engine: ids in equal ids out across turns, the loss mask, each way a trajectory ends, bad calls and slow tools as
counted observations, and trajectories that do not depend on the order they finish in."""

import time
from dataclasses import replace

import pytest
import torch

from megarl.agent import AgentLoop, Tool, ToolContext, ToolOutput, build_tools
from megarl.agent.messages import ToolMessages
from megarl.config.schema import MultiTurnConfig, SandboxConfig
from megarl.data import products
from megarl.models.init_model import write_model
from megarl.rollout.base import Response, RolloutEngine, SamplingParams
from megarl.rollout.transformers_engine import TransformersEngine

PROMPT = [3, 4, 5]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_model("tiny", tmp_path_factory.mktemp("agent") / "model", task="products")


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture
def context():
    context = ToolContext(SandboxConfig(workers=2))
    yield context
    context.close()


class ScriptedEngine(RolloutEngine):
    """Answers each request with the next of `turns`, log-prob −(its position + 1)/10 per token (where the request
    asks for log-probs); records what it
    was asked to continue. `route`: each answer carries a routing (router replay) of every token of the request but
    its last, all of one MoE layer's single expert numbered by the request."""

    def __init__(self, turns: list[list[int]], route: bool = False):
        super().__init__()
        self.turns, self.contexts, self.route = list(turns), [], route

    @classmethod
    def from_config(cls, *args, **kwargs):
        raise NotImplementedError

    @property
    def is_owner(self) -> bool:
        return True

    def load_weights(self, parts) -> None:
        pass

    def generate(self, prompts, params, on_response=None):
        self.contexts.append(list(prompts[0]))
        turn = self.turns.pop(0)  # each ends at a stop token (a call's end or the end of turn) unless cut
        ids = turn[: params.max_new_tokens]
        logprobs = [-(i + 1) / 10 for i in range(len(ids))] if params.logprobs else None
        routing = torch.full((len(prompts[0]) + len(ids) - 1, 1, 1), len(self.contexts)) if self.route else None
        return [[Response(ids, logprobs, "stop" if len(ids) == len(turn) else "length", routed_experts=routing)]]


def char_ids(tokenizer, text: str) -> list[int]:
    """`text` as one token per character (special markers whole): ids that decode to `text` but that encoding
    `text` would not give back."""
    ids = []
    for piece in text.replace("<", "\0<").replace(">", ">\0").split("\0"):
        if piece in products.SPECIAL_TOKENS:
            ids.append(tokenizer.convert_tokens_to_ids(piece))
        else:
            ids += [i for ch in piece for i in tokenizer.encode(ch, add_special_tokens=False)]
    return ids


def loop_of(tokenizer, context, tools=("python",), **multi_turn) -> AgentLoop:
    config = MultiTurnConfig(enable=True, **{"max_assistant_turns": 3, **multi_turn})
    return AgentLoop(tokenizer, config, build_tools(tools, context), max_response_length=200,
                     max_total_tokens=256, workers=2)


def call(code: str) -> str:
    return '<tool_call>{"name": "python", "arguments": {"code": "%s"}}</tool_call>' % code


def test_trained_ids_are_the_engines_ids_across_three_turns(tokenizer, context):
    turns = [char_ids(tokenizer, call("print(6*7)")), char_ids(tokenizer, call("print(42+1)")),
             char_ids(tokenizer, "#### 43") + [tokenizer.eos_token_id]]
    assert tokenizer.encode(call("print(6*7)"), add_special_tokens=False) != turns[0]  # re-encoding would differ
    engine = ScriptedEngine([list(t) for t in turns])
    [[trajectory]] = loop_of(tokenizer, context).generate(engine, [PROMPT], SamplingParams(max_new_tokens=200))
    messages = ToolMessages(tokenizer)
    tool_1, tool_2 = messages.ids(["42"]), messages.ids(["43"])
    assert trajectory.token_ids == turns[0] + tool_1 + turns[1] + tool_2 + turns[2]
    assert engine.contexts == [PROMPT, PROMPT + turns[0] + tool_1, PROMPT + turns[0] + tool_1 + turns[1] + tool_2]
    assert trajectory.loss_mask == [1] * len(turns[0]) + [0] * len(tool_1) + [1] * len(turns[1]) + \
        [0] * len(tool_2) + [1] * len(turns[2])
    model_logprobs = [lp for lp, m in zip(trajectory.logprobs, trajectory.loss_mask) if m]
    assert model_logprobs == [-(i + 1) / 10 for t in turns for i in range(len(t))]
    assert all(lp == 0 for lp, m in zip(trajectory.logprobs, trajectory.loss_mask) if not m)
    assert trajectory.finish_reason == "answer"
    stats = trajectory.agent
    assert (stats.assistant_turns, stats.tool_calls, stats.tool_errors, stats.tool_timeouts) == (3, 2, 0, 0)
    assert tokenizer.decode(tool_1) == "<tool_response>42</tool_response>"


def test_turns_without_log_probs_make_a_trajectory_without_them_and_the_same_mask(tokenizer, context):
    turns = [char_ids(tokenizer, call("print(6*7)")), char_ids(tokenizer, "#### 42") + [tokenizer.eos_token_id]]
    params = SamplingParams(max_new_tokens=200)
    [[asked]] = loop_of(tokenizer, context).generate(ScriptedEngine([list(t) for t in turns]), [PROMPT], params)
    [[unasked]] = loop_of(tokenizer, context).generate(ScriptedEngine([list(t) for t in turns]), [PROMPT],
                                                       replace(params, logprobs=False))
    assert (unasked.token_ids, unasked.loss_mask) == (asked.token_ids, asked.loss_mask)
    assert unasked.logprobs is None and len(asked.logprobs) == len(asked.token_ids)


@pytest.mark.parametrize("max_turns", [3, 2])
def test_a_trajectorys_routing_is_its_last_requests_over_every_token_but_the_last(tokenizer, context, max_turns):
    """Router replay: the last turn's request held the prompt and every earlier turn and tool message, so its routing
    covers the trajectory, also one cut off at the turn limit after a call."""
    turns = [char_ids(tokenizer, call("print(1)")), char_ids(tokenizer, call("print(2)")),
             char_ids(tokenizer, "#### 2") + [tokenizer.eos_token_id]]
    engine = ScriptedEngine(turns, route=True)
    [[trajectory]] = loop_of(tokenizer, context, max_assistant_turns=max_turns).generate(
        engine, [PROMPT], SamplingParams(max_new_tokens=200))
    assert len(engine.contexts) == max_turns
    assert trajectory.routed_experts.shape == (len(PROMPT) + len(trajectory.token_ids) - 1, 1, 1)
    assert trajectory.routed_experts.unique().tolist() == [max_turns]  # the last request's


def test_the_turn_limit_ends_a_trajectory_that_keeps_calling(tokenizer, context):
    engine = ScriptedEngine([char_ids(tokenizer, call("print(1)"))] * 2)
    [[trajectory]] = loop_of(tokenizer, context, max_assistant_turns=2).generate(
        engine, [PROMPT], SamplingParams(max_new_tokens=200))
    assert trajectory.finish_reason == "max_turns"
    assert trajectory.agent.tool_calls == 1 and trajectory.loss_mask[-1] == 1  # the last call is not run


def test_a_tool_message_that_leaves_no_room_is_not_added(tokenizer, context):
    turn = char_ids(tokenizer, call("print(1)"))
    loop = AgentLoop(tokenizer, MultiTurnConfig(enable=True), build_tools(["python"], context),
                     max_response_length=len(turn) + 3, max_total_tokens=256, workers=1)
    [[trajectory]] = loop.generate(ScriptedEngine([turn]), [PROMPT], SamplingParams(max_new_tokens=200))
    assert trajectory.finish_reason == "max_tokens" and trajectory.token_ids == turn
    assert trajectory.loss_mask == [1] * len(turn)


def test_malformed_and_unknown_calls_are_observations_counted_as_errors(tokenizer, context):
    bad_json = char_ids(tokenizer, '<tool_call>{"name": "python", "arguments": </tool_call>')
    unknown = char_ids(tokenizer, '<tool_call>{"name": "search", "arguments": {}}</tool_call>')
    answer = char_ids(tokenizer, "#### 1") + [tokenizer.eos_token_id]
    [[trajectory]] = loop_of(tokenizer, context).generate(
        ScriptedEngine([bad_json, unknown, answer]), [PROMPT], SamplingParams(max_new_tokens=200))
    text = tokenizer.decode(trajectory.token_ids)
    assert "Error: the tool call is not valid JSON" in text and "Error: there is no tool 'search'" in text
    assert trajectory.agent.tool_errors == 2 and trajectory.agent.tool_calls == 0
    assert trajectory.finish_reason == "answer"


class Sleeper(Tool):
    name, description, parameters = "sleep", "sleeps", {"type": "object", "properties": {}}

    def call(self, arguments):
        time.sleep(3)
        return ToolOutput("woke")


def test_a_tool_past_its_timeout_costs_one_timeout_and_the_trajectory_goes_on(tokenizer, context):
    sleep = char_ids(tokenizer, '<tool_call>{"name": "sleep", "arguments": {}}</tool_call>')
    answer = char_ids(tokenizer, "#### 1") + [tokenizer.eos_token_id]
    loop = loop_of(tokenizer, context, tools=(f"{__name__}:Sleeper",), tool_timeout_s=0.3)  # a user's tool
    start = time.perf_counter()
    [[trajectory]] = loop.generate(ScriptedEngine([sleep, answer]), [PROMPT], SamplingParams(max_new_tokens=200))
    assert time.perf_counter() - start < 2
    assert trajectory.agent.tool_timeouts == 1 and trajectory.finish_reason == "answer"
    assert "did not answer within 0.3 s" in tokenizer.decode(trajectory.token_ids)
    loop.close()


def test_trajectories_do_not_depend_on_when_they_finish(model_dir, tokenizer, context):
    """The async mode reports each trajectory as it ends; seeded per trajectory, it samples what the sync mode
    does."""
    engine = TransformersEngine(str(model_dir))
    loop = loop_of(tokenizer, context, max_assistant_turns=2)
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=30, seed=5)
    finished = []
    reported = loop.generate(engine, [PROMPT, [7, 8]], params, on_response=lambda i, k, r: finished.append((i, k)))
    plain = loop.generate(engine, [PROMPT, [7, 8]], params)
    assert [[r.token_ids for r in g] for g in reported] == [[r.token_ids for r in g] for g in plain]
    assert sorted(finished) == [(i, k) for i in range(2) for k in range(3)]
    assert len({tuple(r.token_ids) for g in plain for r in g}) > 1  # the trajectories' seeds differ


def test_a_long_tool_output_is_cut_and_says_how_much(tokenizer, context):
    turns = [char_ids(tokenizer, call("print(7**200)")), char_ids(tokenizer, "#### 1") + [tokenizer.eos_token_id]]
    [[trajectory]] = loop_of(tokenizer, context, max_tool_response_length=10).generate(
        ScriptedEngine(turns), [PROMPT], SamplingParams(max_new_tokens=200))
    digits = str(7 ** 200)
    assert f"<tool_response>{digits[:10]}... [{len(digits) - 10} more characters cut]</tool_response>" in \
        tokenizer.decode(trajectory.token_ids)


def test_the_total_budget_counts_the_prompt(tokenizer, context):
    turn = char_ids(tokenizer, call("print(1)"))
    loop = AgentLoop(tokenizer, MultiTurnConfig(enable=True), build_tools(["python"], context),
                     max_response_length=200, max_total_tokens=len(PROMPT) + len(turn) + 3, workers=1)
    [[trajectory]] = loop.generate(ScriptedEngine([turn]), [PROMPT], SamplingParams(max_new_tokens=200))
    assert trajectory.finish_reason == "max_tokens" and trajectory.token_ids == turn
