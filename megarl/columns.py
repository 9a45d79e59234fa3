"""The step's columns, named once (verl's names), and the contract of each stage of the step.

A step's data is one `Batch` (parallel/batch.py), which each stage extends: `B` samples (a prompt's responses
adjacent), `R` the response width. A stage, driver-side (megarl/trainer/stages.py) or a worker method
(megarl/workers), declares with `@stage(...)` the columns it reads from its batch and those it writes; each call
checks them, so a stage that misses a column names it and the stage that writes it, and a stage that writes more
than it declares is refused. docs/architecture.md's column table is made from these declarations
(`column_table`), and tests/megarl/test_columns.py walks the step of each algorithm through them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterable, TypeVar

import torch

from parallel.batch import Batch


@dataclass(frozen=True)
class Column:
    name: str
    shape: str  # "[B]", "[B, R]", or "per sample" (a Python value: a field)
    holds: str


COLUMNS: dict[str, Column] = {}


def _column(name: str, shape: str, holds: str) -> str:
    COLUMNS[name] = Column(name, shape, holds)
    return name


# The prompts (megarl/data/dataset.py, megarl/rollout/batch.py).
PROMPT_IDS = _column("prompt_ids", "per sample", "the prompt's token ids")
RAW_PROMPT = _column("raw_prompt", "per sample",
                     "the dataset's prompt (text or chat): a reward model re-encodes it; a judge reads it")
DATA_SOURCE = _column("data_source", "per sample", "which rule scores the response")
REWARD_MODEL = _column("reward_model", "per sample", "the dataset's reward entry; its `ground_truth`")
EXTRA_INFO = _column("extra_info", "per sample", "the dataset's extra fields, passed to a reward function")
UID = _column("uid", "per sample", "the prompt's id: the responses to one prompt are a group")
# Generation.
RESPONSES = _column("responses", "[B, R]", "response token ids, right-padded")
RESPONSE_MASK = _column("response_mask", "[B, R]", "1 on the model's response tokens (0 on tool tokens between turns)")
ROLLOUT_LOG_PROBS = _column("rollout_log_probs", "[B, R]", "the engine's log-probs of the response tokens")
FINISH_REASON = _column("finish_reason", "per sample", "stop or length; multi-turn: answer, max_turns or max_tokens")
ROUTED_EXPERTS = _column("routed_experts", "per sample", "R3 (actor.router_replay.mode): the experts the engine routed "
                         "each token it forwarded to, [prompt + response − 1, MoE layers, top-k] int")
AGENT_STATS = _column("agent_stats", "per sample", "multi-turn: the trajectory's turns and tool calls (AgentStats)")
REWARD_OUTCOME = _column("reward_outcome", "per sample", "the async mode's reward, scored as the response finished")
REWARD_BASELINES = _column("reward_baselines", "[B]", "ReMax: the score of the prompt's greedy response")
# Scores.
TOKEN_LEVEL_SCORES = _column("token_level_scores", "[B, R]", "the response's score on its last token")
ACC = _column("acc", "[B]", "the reward function's accuracy, else its score")
PRED = _column("pred", "per sample", "the answer the reward function read")
RULE_SCORES = _column("rule_scores", "[B]", "with a reward model or a judge: the rule's score alone")
RM_SCORES = _column("rm_scores", "[B]", "the reward model's score")
JUDGE_SCORES = _column("judge_scores", "[B]", "the judge's score (reward.judge.unparsed_score where it did not parse)")
JUDGE_PARSED = _column("judge_parsed", "[B]", "1 where the judge's output parsed")
JUDGE_PROMPT = _column("judge_prompt", "per sample", "what the judge read: its template rendered, in its chat template")
JUDGE_OUTPUT = _column("judge_output", "per sample", "what the judge wrote (yes_no: its two words' log-probs)")
JUDGE_AFTER_GEN_S = _column("judge_after_gen_s", "[B]", "rollout.mode=async: seconds after the engine's last response "
                            "that the judge's score came (0: judged while the engine still generated)")
OVERLONG_PENALTY = _column("overlong_penalty", "[B]", "DAPO's penalty of a response too long")
# The model passes.
OLD_LOG_PROBS = _column("old_log_probs", "[B, R]", "the actor's log-probs before its update")
ENTROPYS = _column("entropys", "[B, R]", "the actor's next-token entropy (`log_prob_entropy`)")
ROLLOUT_IS_WEIGHTS = _column("rollout_is_weights", "[B, R]", "rollout correction's importance weights")
ROLLOUT_RS_MASK = _column("rollout_rs_mask", "[B, R]", "rollout correction's kept tokens")
ROUTING_FLIPS = _column("routing_flips", "[B]", "R3: the share of the sample's (token, MoE layer) pairs whose "
                        "experts the actor's router would choose differently from the engine (old-log-prob pass)")
REF_LOG_PROB = _column("ref_log_prob", "[B, R]", "the reference policy's log-probs")
VALUES = _column("values", "[B, R]", "the critic's value before each response token")
# Rewards and advantages.
TOKEN_LEVEL_REWARDS = _column("token_level_rewards", "[B, R]", "the scores, less the KL penalty (`use_kl_in_reward`)")
ADVANTAGES = _column("advantages", "[B, R]", "the estimator's advantages")
RETURNS = _column("returns", "[B, R]", "the estimator's returns (the critic's targets)")
# PPO-ptx's pretraining samples, beside the step's for the actor's update (megarl/trainer/ptx.py).
PTX_PROMPT_IDS = _column("ptx_prompt_ids", "per sample", "a pretraining sample's prompt tokens")
PTX_RESPONSES = _column("ptx_responses", "[B, L]", "its response tokens, right-padded")
PTX_RESPONSE_MASK = _column("ptx_response_mask", "[B, L]", "1 on its response tokens")

SEQUENCES = (PROMPT_IDS, RESPONSES, RESPONSE_MASK)  # what a model pass reads: each prompt + response


def response_lengths(response_mask: torch.Tensor) -> torch.Tensor:
    """[B] each response's length: up to its last 1 in `response_mask`. A multi-turn response holds tool tokens
    (mask 0) between the model's turns, but it always ends on a model token, so this is its length either way."""
    if not response_mask.shape[-1]:
        return torch.zeros(response_mask.shape[:-1], dtype=torch.long, device=response_mask.device)
    positions = torch.arange(1, response_mask.shape[-1] + 1, device=response_mask.device)
    return (response_mask.ne(0) * positions).amax(-1)


class ContractError(RuntimeError):
    """A stage was called without a column it reads, or wrote one it does not declare."""


@dataclass(frozen=True)
class Contract:
    stage: str
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    reads_if_present: tuple[str, ...] = ()  # read where an earlier stage wrote them (a branch of the step)
    may_write: tuple[str, ...] = ()  # written in some configurations

    def check_input(self, batch: Any) -> None:
        missing = [name for name in self.reads if name not in batch]
        if missing:
            writers = {name: [c.stage for c in CONTRACTS if name in c.writes + c.may_write] for name in missing}
            raise ContractError(f"{self.stage} reads {missing}, which the batch lacks (written by: {writers}); "
                                f"the batch has {sorted(batch.keys())}")

    def check_output(self, before: Any, after: Any) -> None:
        written = set(after.keys()) - (set(before.keys()) if before is not None else set())
        undeclared = written - set(self.writes) - set(self.may_write)
        if undeclared:
            raise ContractError(f"{self.stage} wrote {sorted(undeclared)}, which it does not declare")
        missing = set(self.writes) - set(after.keys())
        if missing:
            raise ContractError(f"{self.stage} declares {sorted(missing)} but did not write them")


CONTRACTS: list[Contract] = []
F = TypeVar("F", bound=Callable[..., Any])


def stage(reads: Iterable[str] = (), writes: Iterable[str] = (), reads_if_present: Iterable[str] = (),
          may_write: Iterable[str] = ()) -> Callable[[F], F]:
    """Declare a stage's columns: its first `Batch` argument must hold `reads`, and what it returns (a `Batch`, or a
    tuple whose first item is one) holds `writes` and nothing new beyond `writes` and `may_write`."""

    def declare(fn: F) -> F:
        # A method by its class (ActorWorker.compute_log_prob), a function by its module (stages.score).
        name = fn.__qualname__ if "." in fn.__qualname__ else f"{fn.__module__.rpartition('.')[2]}.{fn.__qualname__}"
        contract = Contract(name, tuple(reads), tuple(writes), tuple(reads_if_present), tuple(may_write))
        for name in (*contract.reads, *contract.writes, *contract.reads_if_present, *contract.may_write):
            if name not in COLUMNS:
                raise ValueError(f"{contract.stage} declares {name!r}, which megarl/columns.py does not name")
        CONTRACTS.append(contract)

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            batch = next((a for a in args if _is_batch(a)), None)
            if batch is not None:
                contract.check_input(batch)
            result = fn(*args, **kwargs)
            out = result[0] if isinstance(result, tuple) else result
            if _is_batch(out):
                contract.check_output(batch, out)
            return result

        checked.__contract__ = contract  # type: ignore[attr-defined]
        return checked  # type: ignore[return-value]

    return declare


def contract_of(fn: Callable) -> Contract:
    return fn.__contract__  # type: ignore[attr-defined]


def _is_batch(value: Any) -> bool:
    return isinstance(value, Batch)


def column_table(contracts: Iterable[Contract]) -> str:
    """The columns as docs/architecture.md shows them: each one's shape and meaning, the stages that write it and
    those that read it."""
    contracts = list(contracts)

    def stages(name: str, *kinds: str) -> str:
        found = sorted(c.stage for c in contracts if any(name in getattr(c, k) for k in kinds))
        return ", ".join(f"`{s}`" for s in found)

    lines = ["| column | shape | holds | written by | read by |", "| --- | --- | --- | --- | --- |"]
    for column in COLUMNS.values():
        writers = stages(column.name, "writes", "may_write") or "the prompts"
        lines.append(f"| `{column.name}` | {column.shape} | {column.holds} | {writers} | "
                     f"{stages(column.name, 'reads', 'reads_if_present')} |")
    return "\n".join(lines)
