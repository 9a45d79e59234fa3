"""`reward.judge` checked against the recipe (docs/judge.md): its parser and the parser's settings, its prompt
template, its sampling, its weights and where it runs; each problem names its key and the fix."""

from __future__ import annotations

import math
import re

from megarl.config.ranges import check_number
from megarl.config.schema import JudgeConfig, MegaRLConfig
from megarl.registry import did_you_mean
from megarl.rewards.judge import JUDGE_PARSERS, TEMPLATE_FIELDS, template_fields


def check_judge(cfg: MegaRLConfig, problems: list[str]) -> None:
    judge = cfg.reward.judge
    if not judge.model.path:
        return
    _check_parse(judge, problems)
    _check_prompt(judge.prompt, problems)
    sampling = judge.sampling
    check_number(problems, "reward.judge.sampling.temperature", sampling.temperature, "≥ 0", " (0: greedy)")
    check_number(problems, "reward.judge.sampling.top_p", sampling.top_p, "in (0, 1]")
    if sampling.top_k != -1 and sampling.top_k < 1:
        problems.append(f"reward.judge.sampling.top_k={sampling.top_k} must be -1 (off) or ≥ 1")
    if sampling.max_new_tokens < 1:
        problems.append(f"reward.judge.sampling.max_new_tokens={sampling.max_new_tokens} must be at least 1")
    if cfg.algorithm.adv_estimator == "remax":
        problems.append("algorithm.adv_estimator=remax cannot run with reward.judge: its greedy baseline is scored by "
                        "the rules alone, without the judge; use grpo or rloo")
    check_number(problems, "reward.judge.weight", judge.weight, "a finite number")
    check_number(problems, "reward.judge.unparsed_score", judge.unparsed_score, "a finite number")
    _check_placement(cfg, problems)


def _check_parse(judge: JudgeConfig, problems: list[str]) -> None:
    parse = judge.parse
    if parse.type not in JUDGE_PARSERS:
        problems.append(f"reward.judge.parse.type={parse.type!r} is not one of: {', '.join(JUDGE_PARSERS.names())}."
                        + did_you_mean(parse.type, JUDGE_PARSERS.names()))
    elif parse.type == "last_number" and not (math.isfinite(parse.min) and math.isfinite(parse.max)
                                              and parse.min < parse.max):
        problems.append(f"reward.judge.parse.min={parse.min} and max={parse.max} must be finite with min < max "
                        "(the scale the judge is asked to score on, e.g. 0 and 10)")
    elif parse.type == "regex":
        _check_pattern(parse.pattern, parse.group, problems)
    elif parse.type == "yes_no":
        _check_words(parse.yes, parse.no, problems)


def _check_words(yes: str, no: str, problems: list[str]) -> None:
    booleans = [f"{key}={word}" for key, word in (("yes", yes), ("no", no)) if word in ("True", "False")]
    if booleans:  # YAML reads an unquoted yes/no/on/off as a boolean, which the string key takes as True/False
        problems.append(f"reward.judge.parse.{', '.join(booleans)}: YAML read the word as a boolean; quote it "
                        "(reward.judge.parse.yes='\"yes\"' on the command line, yes: \"yes\" in a recipe)")
    elif not yes or not no or yes == no:
        problems.append(f"reward.judge.parse.yes={yes!r} and no={no!r} must be two different words")


def _check_pattern(pattern: str | None, group: int, problems: list[str]) -> None:
    if not pattern:
        problems.append("reward.judge.parse.type=regex needs reward.judge.parse.pattern, e.g. 'Score: (\\d+)'")
        return
    try:
        groups = re.compile(pattern).groups
    except re.error as e:
        problems.append(f"reward.judge.parse.pattern={pattern!r} is not a regular expression: {e}")
        return
    if not 0 <= group <= groups:
        problems.append(f"reward.judge.parse.group={group} must name one of the pattern's {groups} groups "
                        f"(0: the whole match): the pattern is {pattern!r}")


def _check_prompt(template: str, problems: list[str]) -> None:
    try:
        fields = template_fields(template)
    except ValueError as e:
        problems.append(f"reward.judge.prompt is not a template: {e}")
        return
    if "response" not in fields:
        problems.append("reward.judge.prompt must show the judge the response: put {response} in it (the other "
                        f"fields: {', '.join(f for f in TEMPLATE_FIELDS if f != 'response')} and extra_info's)")


def _check_placement(cfg: MegaRLConfig, problems: list[str]) -> None:
    judge = cfg.reward.judge
    engines = cfg.judge_world_size
    where = ("reward.judge.nnodes × reward.judge.n_gpus_per_node" if judge.enable_resource_pool
             else "trainer.nnodes × trainer.n_gpus_per_node")
    if judge.enable_resource_pool and engines < 1:
        problems.append(f"reward.judge.enable_resource_pool=true needs GPUs: set {where} to 1 or more")
    samples = cfg.data.generation_batch_size * cfg.rollout.n
    if engines >= 1 and samples % engines:
        problems.append(f"data.train_batch_size × rollout.n = {samples} responses cannot be shared among the "
                        f"judge's {engines} engines (one on each GPU of {where}): make it a multiple of {engines}")
    share = judge.gpu_memory_utilization
    if not 0 < share < 1:
        problems.append(f"reward.judge.gpu_memory_utilization={share} must be in (0, 1)")
    elif not (cfg.rollout.enable_resource_pool or judge.enable_resource_pool) and \
            cfg.rollout.gpu_memory_utilization + share >= 1:
        problems.append(f"rollout.gpu_memory_utilization={cfg.rollout.gpu_memory_utilization} + "
                        f"reward.judge.gpu_memory_utilization={share} must be below 1: both engines hold their "
                        "share of each GPU during the judge's pass")
