"""benchmarks/multi_turn.py: the scripted model writes its filler and then a python call every turn, from the end of
the generation prompt and of every tool message alike, sampled at temperature 1; without the loop the chain starts
over after the call (so single-turn responses run to their length); a run whose trajectories did not call every turn
is refused."""

import sys

import pytest
import torch

from tests.helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from multi_turn import CALL_TOKENS, multi_turn_checks, script_model  # noqa: E402

from megarl.agent.calls import HermesParser, ToolCall  # noqa: E402
from megarl.agent.messages import ToolMessages  # noqa: E402

SMALL = {"num_hidden_layers": 1, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 512}  # the shape's layer types, at a size a test loads in a second


def test_the_scripted_model_calls_the_tool_every_turn(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from megarl.models.init_model import write_model

    model_dir = write_model("qwen2.5-0.5b", tmp_path / "model", dtype=torch.bfloat16, **SMALL)
    filler, code = 20, "print(6 * 7)"
    script_model(model_dir, filler, code)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    turn = filler + CALL_TOKENS
    close = tokenizer.encode("</tool_call>", add_special_tokens=False)
    assert len(close) == 1  # the loop's stop token
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Natalia sold 48 clips."}],
                                           add_generation_prompt=True, tokenize=False)
    context = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    turns = []
    for _ in range(2):  # a turn, the tool's answer, the next turn
        torch.manual_seed(len(turns))
        out = model.generate(torch.tensor([context]), max_new_tokens=2 * turn, do_sample=True, temperature=1.0,
                             top_k=0, top_p=1.0)[0, len(context):].tolist()
        assert out[turn - 1] == close[0] and out[turn:] == out[:turn]  # without a stop, the chain starts over
        turns.append(out[:turn])
        context += out[:turn] + ToolMessages(tokenizer).ids(["42"])
    assert turns[0] == turns[1]
    parsed = HermesParser().parse(tokenizer.decode(turns[0], skip_special_tokens=False))
    assert parsed.calls == [ToolCall("python", {"code": code})]


def test_a_run_whose_trajectories_skipped_calls_is_refused():
    step = {"multi_turn/assistant_turns/mean": 3.0, "multi_turn/finish/max_turns": 1.0, "tool/calls_per_sample": 2.0,
            "tool/errors": 0.0, "tool/timeouts": 0.0, "timing_s/tools": 1.0, "timing_s/step": 4.0,
            "timing_s/gen": 2.0, "tool/latency_s": 0.1}
    assert multi_turn_checks([step], turns=3)["tools_share_of_step"] == 0.25
    with pytest.raises(SystemExit, match="did not call the tool every turn"):
        multi_turn_checks([step, {**step, "tool/calls_per_sample": 1.5}], turns=3)
