"""The transformers rollout engine in one process: sampling parameters, stop tokens, log-prob semantics and the
memory release/resume protocol."""

from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM

from megarl.rollout import SamplingParams
from megarl.rollout.transformers_engine import TransformersEngine
from tests.helpers import make_model

PROMPTS = [[5, 17, 33, 2, 9], [40, 41, 42]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model("qwen2", tmp_path_factory.mktemp("engine") / "model")


@pytest.fixture
def engine(model_dir):
    return TransformersEngine(str(model_dir))


def test_greedy_is_deterministic_and_log_probs_are_the_models(engine, model_dir):
    params = SamplingParams(n=2, temperature=0.0, max_new_tokens=5, ignore_eos=True)
    first, again = engine.generate(PROMPTS, params), engine.generate(PROMPTS, params)
    assert [[r.token_ids for r in rs] for rs in first] == [[r.token_ids for r in rs] for rs in again]
    assert all(len(rs) == 2 and rs[0].token_ids == rs[1].token_ids and len(rs[0].token_ids) == 5 for rs in first)
    hf = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    for prompt, (response, _) in zip(PROMPTS, first):
        ids = torch.tensor([prompt + response.token_ids])
        logprobs = torch.log_softmax(hf(ids).logits[0, len(prompt) - 1 : -1], -1)
        expected = logprobs.gather(-1, torch.tensor(response.token_ids)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(response.logprobs), expected, atol=1e-5)
        assert response.token_ids == logprobs.argmax(-1).tolist()


def test_sampling_follows_the_seed(engine):
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=6, seed=3, ignore_eos=True)
    a, b = engine.generate(PROMPTS, params), engine.generate(PROMPTS, params)
    c = engine.generate(PROMPTS, SamplingParams(n=3, temperature=1.0, max_new_tokens=6, seed=4, ignore_eos=True))
    tokens = lambda out: [[r.token_ids for r in rs] for rs in out]  # noqa: E731
    assert tokens(a) == tokens(b) != tokens(c)
    assert len({tuple(r.token_ids) for r in a[0]}) > 1  # n samples differ from one another


def test_a_request_without_log_probs_gets_the_same_tokens_and_none(engine):
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=5, seed=7, ignore_eos=True)
    asked, unasked = engine.generate(PROMPTS, params), engine.generate(PROMPTS, replace(params, logprobs=False))
    assert [[r.token_ids for r in rs] for rs in asked] == [[r.token_ids for r in rs] for rs in unasked]
    assert all(len(r.logprobs) == 5 for rs in asked for r in rs)
    assert all(r.logprobs is None for rs in unasked for r in rs)


def test_stop_tokens_end_a_response_and_are_kept(engine):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=4, ignore_eos=True)
    first_token = engine.generate(PROMPTS[:1], greedy)[0][0].token_ids[0]
    stopped = engine.generate(PROMPTS[:1], SamplingParams(temperature=0.0, max_new_tokens=4,
                                                          stop_token_ids=(first_token,)))[0][0]
    assert (stopped.token_ids, stopped.finish_reason, len(stopped.logprobs)) == ([first_token], "stop", 1)
    assert engine.generate(PROMPTS[:1], greedy)[0][0].finish_reason == "length"


def test_memory_release_and_resume_protocol(engine):
    held = engine.held_bytes()
    engine.release_memory()
    assert engine.held_bytes() == 0
    with pytest.raises(RuntimeError, match="resume"):
        engine.generate(PROMPTS, SamplingParams(max_new_tokens=2))
    with pytest.raises(RuntimeError, match="resume_memory\\(\\['weights'\\]\\) first"):
        engine.load_weights([])
    engine.resume_memory(["weights"])
    assert engine.held_bytes() == held
    engine.resume_memory(["kv_cache"])
    with pytest.raises(RuntimeError, match="sync weights first"):
        engine.generate(PROMPTS, SamplingParams(max_new_tokens=2))
    with pytest.raises(RuntimeError, match="was not released"):
        engine.resume_memory(["kv_cache"])


def test_each_response_is_reported_as_it_finishes_and_is_the_sync_one(engine):
    """The async mode's callback: every (prompt, sample) once, with the response the call returns, and the samples
    those of the call without a callback (same seed)."""
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=6, seed=11, ignore_eos=True)
    reported = {}
    streamed = engine.generate(PROMPTS, params, on_response=lambda i, k, r: reported.setdefault((i, k), r))
    assert sorted(reported) == [(i, k) for i in range(len(PROMPTS)) for k in range(3)]
    assert all(reported[i, k] is streamed[i][k] for i, k in reported)
    plain = engine.generate(PROMPTS, params)
    assert [[r.token_ids for r in rs] for rs in streamed] == [[r.token_ids for r in rs] for rs in plain]
