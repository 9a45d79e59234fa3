"""The judge (megarl/workers/judge.py) on the transformers engine, against transformers itself on the same rendered
prompts: its scores are greedy `generate` + the parser's, its yes_no score the softmax over the two words' logits
computed by hand; words of several tokens are refused; an all-unparsed batch stops with the template and an output.
Streaming (rollout.mode=async): the same verdicts as the batch's, each given while later responses are still to come."""

import time

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from megarl.config.schema import JudgeConfig, JudgeParseConfig, JudgeSamplingConfig, ModelConfig
from megarl.columns import (JUDGE_AFTER_GEN_S, JUDGE_OUTPUT, JUDGE_PARSED, JUDGE_PROMPT, JUDGE_SCORES,
                            RAW_PROMPT, RESPONSE_MASK, RESPONSES, response_lengths)
from megarl.rewards.judge import judge_parser, render_prompt
from megarl.rollout.base import Response
from megarl.rollout.batch import prompt_batch, with_responses
from megarl.rollout.transformers_engine import TransformersEngine
from megarl.trainer.stages import JudgeUnparsedError, check_judged
from megarl.workers.judge import Judge, StreamingJudge, Verdict, judged
from tests.helpers import make_chat_model

TEMPLATE = "Question: {prompt}\nAnswer: {response}\nExpected: {ground_truth} ({level})\nScore 0-9:"
QUESTIONS = [("What is 2 + 3?", "5"), ("What is 4 + 4?", "8"), ("What is 1 + 6?", "7")]
ANSWERS = ["The answer is 5", "#### 9", "It is 7. #### 7"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("judge")
    return make_chat_model(root / "policy"), make_chat_model(root / "judge", seed=3)


def responses(policy_dir):
    """Each question answered once, as the rollout lays the batch out."""
    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    prompts = prompt_batch({"prompt_ids": [[1]] * 3, "data_source": ["openai/gsm8k"] * 3,
                            "raw_prompt": [[{"role": "user", "content": q}] for q, _ in QUESTIONS],
                            "reward_model": [{"ground_truth": truth} for _, truth in QUESTIONS],
                            "extra_info": [{"level": level} for level in ("easy", "easy", "hard")]})
    answers = [[Response(tokenizer(a, add_special_tokens=False)["input_ids"], [0.0], "stop")] for a in ANSWERS]
    return with_responses(prompts, answers)


def make_judge(judge_dir, policy_dir, **parse) -> Judge:
    config = JudgeConfig(model=ModelConfig(path=str(judge_dir)), prompt=TEMPLATE, parse=JudgeParseConfig(**parse),
                         sampling=JudgeSamplingConfig(max_new_tokens=24), unparsed_score=-1.0)
    return Judge(TransformersEngine(str(judge_dir)), config, AutoTokenizer.from_pretrained(judge_dir),
                 AutoTokenizer.from_pretrained(policy_dir))


def hf_inputs(judge_dir):
    """What transformers reads for each response: the template rendered by hand, in the judge's chat template."""
    tokenizer = AutoTokenizer.from_pretrained(judge_dir)
    texts = [tokenizer.apply_chat_template(
        [{"role": "user", "content": render_prompt(TEMPLATE, q, answer, truth, {"level": level})}],
        add_generation_prompt=True, tokenize=False) for (q, truth), answer, level in
        zip(QUESTIONS, ANSWERS, ("easy", "easy", "hard"))]
    return tokenizer, texts, [torch.tensor([tokenizer(t, add_special_tokens=False)["input_ids"]]) for t in texts]


def test_scores_are_greedy_generate_and_the_parser(models):
    policy, judge_dir = models
    judge = make_judge(judge_dir, policy)
    out = judge(responses(policy))
    tokenizer, texts, inputs = hf_inputs(judge_dir)
    assert list(out[JUDGE_PROMPT]) == texts and "Expected: 7 (hard)" in texts[2]
    model = AutoModelForCausalLM.from_pretrained(judge_dir, dtype=torch.float32).eval()
    parser = judge_parser(JudgeParseConfig())
    expected_outputs, expected_scores = [], []
    for ids in inputs:
        generated = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False,
                                   eos_token_id=tokenizer.eos_token_id, pad_token_id=0)
        text = tokenizer.decode(generated[0, ids.shape[1]:], skip_special_tokens=True)
        expected_outputs.append(text)
        score = parser.score(text)
        expected_scores.append(-1.0 if score is None else score)
    assert list(out[JUDGE_OUTPUT]) == expected_outputs
    assert out[JUDGE_SCORES].tolist() == expected_scores
    assert out[JUDGE_PARSED].tolist() == [float(s != -1.0) for s in expected_scores]
    assert 0 < out[JUDGE_PARSED].sum() < 3  # this judge's outputs both parse and do not: both paths are compared


def test_yes_no_is_the_softmax_over_the_two_words_logits(models):
    policy, judge_dir = models
    out = make_judge(judge_dir, policy, type="yes_no", yes="Y", no="N")(responses(policy))
    tokenizer, _, inputs = hf_inputs(judge_dir)
    model = AutoModelForCausalLM.from_pretrained(judge_dir, dtype=torch.float32).eval()
    yes, no = (tokenizer.convert_tokens_to_ids(word) for word in ("Y", "N"))
    with torch.no_grad():
        expected = [torch.softmax(model(ids).logits[0, -1, [yes, no]], dim=-1)[0].item() for ids in inputs]
    assert out[JUDGE_SCORES].tolist() == pytest.approx(expected, abs=1e-6)
    assert len(set(round(p, 6) for p in expected)) == 3 and out[JUDGE_PARSED].tolist() == [1.0] * 3
    assert out[JUDGE_OUTPUT][0].startswith("Y: log-prob -")


def test_a_streaming_judge_gives_each_verdict_while_later_responses_are_still_to_come(models):
    policy, judge_dir = models
    judge = make_judge(judge_dir, policy, type="yes_no", yes="Y", no="N")
    batch = responses(policy)
    truths = [truth for _, truth in QUESTIONS]
    with StreamingJudge(judge, len(batch)) as stream:
        for row in range(len(batch)):  # as an engine reports them: one by one, the next only after a verdict
            length = int(response_lengths(batch[RESPONSE_MASK])[row])
            stream.submit(row, batch[RAW_PROMPT][row], batch[RESPONSES][row, :length].tolist(), truths[row],
                          {"level": ("easy", "easy", "hard")[row]})
            deadline = time.monotonic() + 60
            while not stream.has_result(row):
                assert time.monotonic() < deadline, f"no verdict on response {row} while generation went on"
                time.sleep(0.01)
        out = stream.judged(generated_at=time.perf_counter())
    expected = judge(batch)
    assert list(out[JUDGE_PROMPT]) == list(expected[JUDGE_PROMPT])
    assert out[JUDGE_SCORES].tolist() == pytest.approx(expected[JUDGE_SCORES].tolist(), abs=1e-6)
    assert out[JUDGE_AFTER_GEN_S].tolist() == [0.0] * 3  # each came before the last response


def test_words_of_several_tokens_are_refused(models):
    policy, judge_dir = models
    with pytest.raises(ValueError, match=r"reward.judge.parse.yes='yes' is 3 tokens of the judge's tokenizer"):
        make_judge(judge_dir, policy, type="yes_no")


def test_an_all_unparsed_batch_stops_with_the_template_and_an_output():
    config = JudgeConfig(prompt=TEMPLATE)
    outputs = ["I cannot judge this.", "Hmm."]
    unparsed = [Verdict(None, "p1", outputs[0]), Verdict(None, "p2", outputs[1])]
    with pytest.raises(JudgeUnparsedError) as info:
        check_judged(judged(unparsed, 0.0), config)
    message = str(info.value)
    assert "none of the judge's 2 outputs of the batch parsed (reward.judge.parse.type=last_number, on the scale " \
           "[0.0, 10.0])" in message
    assert TEMPLATE in message and "I cannot judge this." in message
    check_judged(judged([unparsed[0], Verdict(3.0, "p2", outputs[1])], 0.0), config)  # one parsed: the run goes on
