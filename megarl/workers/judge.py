"""The judge role (`reward.judge`, docs/judge.md): an LLM that reads each response in a prompt of its own and whose
answer, parsed, is the response's score. It runs in the actor's processes or on GPUs of its own, an engine of the
rollout backend of one GPU on each rank (the transformers engine on CPU, SGLang on GPU) serving the judge's own
checkpoint, which no weight sync touches. Beside the actor the engine's KV cache is released outside the judge's
pass, so the policy's phases have that memory (its weights stay: the engine could not get them back without reading
the checkpoint again); on GPUs of its own it keeps it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, NamedTuple, Optional, Sequence

import torch
import torch.distributed as dist

from megarl.columns import (EXTRA_INFO, JUDGE_AFTER_GEN_S, JUDGE_OUTPUT, JUDGE_PARSED, JUDGE_PROMPT, JUDGE_SCORES,
                            RAW_PROMPT, RESPONSE_MASK, RESPONSES, REWARD_MODEL, response_lengths, stage)
from megarl.config.schema import JudgeConfig
from megarl.models.bridge import load_hf_config
from megarl.models.tokenizer import load_tokenizer
from megarl.rewards.judge import judge_parser, render_prompt
from megarl.rewards.stream import BatchingStream
from megarl.rollout.base import KV_CACHE, RolloutEngine, SamplingParams, rollout_backend
from megarl.rollout.batch import ground_truths
from megarl.workers.inputs import JudgeInputs, model_path
from parallel.batch import Batch
from parallel.dispatch import Collect, Dispatch, RankLayout, worker_method
from parallel.engines import place_engines
from parallel.worker import Worker

JUDGED = (JUDGE_SCORES, JUDGE_PARSED, JUDGE_PROMPT, JUDGE_OUTPUT)


class Verdict(NamedTuple):
    score: Optional[float]  # None: the output did not parse
    prompt: str  # what the judge read
    output: str  # what it wrote (yes_no: its two words' log-probs)


def word_token_ids(tokenizer, words: Sequence[str]) -> list[int]:
    """The token id of each word, which must be one token of the judge's tokenizer."""
    ids = []
    for key, word in zip(("yes", "no"), words):
        pieces = tokenizer.encode(word, add_special_tokens=False)
        if len(pieces) != 1:
            shown = [tokenizer.decode([piece]) for piece in pieces]
            raise ValueError(f"reward.judge.parse.{key}={word!r} is {len(pieces)} tokens of the judge's tokenizer "
                             f"({shown}): yes_no reads one token per word; choose words of one token each (often "
                             f"with a leading space, ' {word.strip()}', or capitalised)")
        ids.append(pieces[0])
    return ids


class Judge:
    """The judge's work on its engine's owner: each response's prompt rendered, the engine asked (a generation, or
    the next-token log-probs of the parser's words), the answer parsed. Apart from the worker, so that it runs on an
    engine without a process group."""

    def __init__(self, engine: RolloutEngine, judge: JudgeConfig, tokenizer, policy_tokenizer, seed: int = 0):
        self.engine, self.config, self.tokenizer, self.policy_tokenizer = engine, judge, tokenizer, policy_tokenizer
        self.parser = judge_parser(judge.parse)
        self.word_ids = word_token_ids(tokenizer, self.parser.words) if self.parser.words else []
        sampling = judge.sampling
        self.params = SamplingParams(n=1, temperature=sampling.temperature, top_p=sampling.top_p,
                                     top_k=sampling.top_k, max_new_tokens=sampling.max_new_tokens, seed=seed,
                                     logprobs=False)

    def render(self, raw_prompt, response_ids: Sequence[int], truth, extra: dict | None) -> str:
        """What the judge reads for a response: the template filled, as a user turn of the judge's chat template,
        with the generation prompt."""
        response = self.policy_tokenizer.decode(list(response_ids), skip_special_tokens=True)
        content = render_prompt(self.config.prompt, raw_prompt, response, truth, extra)
        return self.tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                                  tokenize=False)

    def rendered(self, batch: Batch) -> list[str]:
        lengths = response_lengths(batch[RESPONSE_MASK]).tolist()
        extras = list(batch[EXTRA_INFO]) if EXTRA_INFO in batch else [None] * len(batch)
        return [self.render(batch[RAW_PROMPT][row], batch[RESPONSES][row, :length].tolist(), truth, extra)
                for row, (length, truth, extra) in enumerate(zip(lengths, ground_truths(batch), extras))]

    def answer(self, prompts: list[str]) -> list[Verdict]:
        """The judge's verdict on each rendered prompt."""
        ids = [self.tokenizer(text, add_special_tokens=False)["input_ids"] for text in prompts]
        if self.word_ids:
            word_logprobs = self.engine.next_token_logprobs(ids, self.word_ids)
            return [Verdict(self.parser.score("", lps), prompt,
                            ", ".join(f"{word}: log-prob {lp:.4f}" for word, lp in zip(self.parser.words, lps)))
                    for prompt, lps in zip(prompts, word_logprobs)]
        groups = self.engine.generate(ids, self.params)
        outputs = [self.tokenizer.decode(group[0].token_ids, skip_special_tokens=True) for group in groups]
        return [Verdict(self.parser.score(text), prompt, text) for prompt, text in zip(prompts, outputs)]

    def __call__(self, batch: Batch) -> Batch:
        return judged(self.answer(self.rendered(batch)), self.config.unparsed_score)


def judged(verdicts: Sequence[Verdict], unparsed_score: float) -> Batch:
    """The judge's columns: an output that did not parse scores `unparsed_score`."""
    scores = [unparsed_score if v.score is None else v.score for v in verdicts]
    return Batch({JUDGE_SCORES: torch.tensor(scores, dtype=torch.float32),
                  JUDGE_PARSED: torch.tensor([v.score is not None for v in verdicts], dtype=torch.float32)},
                 {JUDGE_PROMPT: [v.prompt for v in verdicts], JUDGE_OUTPUT: [v.output for v in verdicts]})


class StreamingJudge(BatchingStream[tuple, Verdict]):
    """Beside generation (rollout.mode=async, the judge beside the rollout's engine): each response is judged as it
    finishes, with the others waiting when the judge's engine is free, while the rollout's engine goes on."""

    def __init__(self, judge: Judge, count: int):
        super().__init__(lambda rows: judge.answer([judge.render(*row) for row in rows]), count, "judge")
        self.unparsed_score = judge.config.unparsed_score

    def submit(self, index: int, raw_prompt, response_ids: Sequence[int], truth, extra: dict | None) -> None:
        self.put(index, (raw_prompt, response_ids, truth, extra))

    def judged(self, generated_at: float) -> Batch:
        """Every response's verdict, and how long after `generated_at` (the engine's last response) it came."""
        verdicts, done_at = self.results(), self.done_at()
        came = [(verdict, at) for verdict, at in zip(verdicts, done_at) if verdict is not None and at is not None]
        if len(came) < len(verdicts):
            missing = [index for index, verdict in enumerate(verdicts) if verdict is None]
            raise RuntimeError(f"the judge got no response at {missing[:5]} of {len(verdicts)}: the engine reported "
                               "fewer responses than it returned")
        after = torch.tensor([max(0.0, at - generated_at) for _, at in came], dtype=torch.float32)
        return judged([verdict for verdict, _ in came], self.unparsed_score).union(Batch({JUDGE_AFTER_GEN_S: after}))


class JudgeWorker(Worker):
    """On every rank of the actor's pool: an engine of one GPU each, whose share of a batch is its rank's."""

    def __init__(self, inputs: JudgeInputs):
        self.placement = place_engines(1, 1)
        path = model_path(inputs.judge.model.path, "reward.judge.model.path")
        slot = self.placement.slot
        self.engine = rollout_backend(inputs.engine.name).from_config(
            inputs.engine, path, engine_ranks=slot.engine_ranks, group=self.placement.group,
            local_devices=self.placement.local_devices, hf_config=load_hf_config(path), seed=inputs.seed + slot.engine)
        self.resident = inputs.resident
        if not self.resident:
            self.engine.release_memory([KV_CACHE])  # until its first pass
        self.judge_batch = Judge(self.engine, inputs.judge, load_tokenizer(inputs.judge.model),
                                 load_tokenizer(inputs.policy), inputs.seed)

    def layout(self) -> RankLayout:
        return RankLayout(dist.get_rank(), dist.get_world_size(), True)

    def close(self) -> None:
        self.engine.shutdown()

    @contextmanager
    def engine_memory(self) -> Iterator[Judge]:
        """The judge with its engine's KV cache in place, for a pass (beside the actor it is released after)."""
        if self.resident:
            yield self.judge_batch
            return
        self.engine.resume_memory([KV_CACHE])
        try:
            yield self.judge_batch
        finally:
            self.engine.release_memory([KV_CACHE])

    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    @stage(reads=(RESPONSES, RESPONSE_MASK, RAW_PROMPT, REWARD_MODEL), writes=JUDGED, reads_if_present=(EXTRA_INFO,))
    def judge(self, batch: Batch) -> Batch:
        """This rank's share of the responses judged: `judge_scores`, `judge_parsed` and what the judge read and
        wrote."""
        with self.engine_memory() as judge:
            return judge(batch)
