"""The hermes tool-call format (Qwen2.5/Qwen3's), read from a turn's text: calls, and what is wrong with the ones
that do not parse."""

from megarl.agent.calls import CallError, HermesParser, ToolCall

PARSE = HermesParser().parse


def test_a_call_with_object_or_string_arguments():
    text = 'Let me run it.\n<tool_call>\n{"name": "python", "arguments": {"code": "print(1)"}}\n</tool_call>'
    assert PARSE(text).calls == [ToolCall("python", {"code": "print(1)"})]
    text = '<tool_call>{"name": "python", "arguments": "{\\"code\\": \\"print(2)\\"}"}</tool_call>'
    assert PARSE(text).calls == [ToolCall("python", {"code": "print(2)"})]


def test_no_call_is_an_answer():
    assert not PARSE("#### 42").wants_tools


def test_calls_that_do_not_parse_say_why():
    cases = {
        '<tool_call>{"name": "python", "arguments": }</tool_call>': "not valid JSON",
        '<tool_call>{"arguments": {}}</tool_call>': 'needs a "name"',
        '<tool_call>{"name": "python", "arguments": [1]}</tool_call>': "must be an object",
        '<tool_call>{"name": "python", "arguments": "x"}</tool_call>': "not a JSON object",
        '<tool_call>{"name": "python"': "not closed",
    }
    for text, reason in cases.items():
        [call] = PARSE(text).calls
        assert isinstance(call, CallError) and reason in call.message, (text, call)


def test_several_calls_in_order():
    text = ('<tool_call>{"name": "a", "arguments": {}}</tool_call> and '
            '<tool_call>{"name": "b", "arguments": {"x": 1}}</tool_call>')
    assert PARSE(text).calls == [ToolCall("a", {}), ToolCall("b", {"x": 1})]
