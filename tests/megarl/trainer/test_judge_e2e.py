"""An LLM judge (`reward.judge`) in tiny GRPO runs on CPU, its engine the transformers one: on a pool of its own under
Ray and under torchrun, rewarding alone (a regex parser over what it generates, the batch judged after generation);
under torchrun
in the actor's two processes beside a reward function by weight (yes_no, from its next-token log-probs), in the
rollout's async mode, so each response judged as it finishes. Each logged sample's judge score is recomputed here
with transformers from the prompt the sample log says the judge read."""

import json
import re
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from parallel.topology import free_port
from tests.helpers import make_digit_judge, overrides, read_metrics, run_command

JUDGE_METRICS = {"reward/judge_score/mean", "reward/judge_score/min", "reward/judge_score/max", "reward/judge_unparsed",
                 "reward/rule_score/mean"}
BATCH_JUDGED = {"timing_s/judge"}  # its own phase after generation
STREAM_JUDGED = {"reward/judge_after_gen_s/max", "reward/judge_during_gen"}  # within generation
LENGTH_REWARD = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" \
                "    return len(solution_str) / 10\n"


@pytest.fixture(scope="module")
def judge(tmp_path_factory):
    return make_digit_judge(tmp_path_factory.mktemp("judge") / "judge")


def train(setup, out, judge, *extra, launcher=(sys.executable,), metrics=BATCH_JUDGED):
    """`launcher`: the command that starts `-m megarl.train` (python for Ray, torchrun's)."""
    proc = run_command([*launcher, "-m", "megarl.train",
                        *overrides(setup, out, "algorithm.adv_estimator=grpo", f"reward.judge.model.path={judge}",
                                   "trainer.log_samples=-1", *extra)], timeout=480)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    steps = read_metrics(out)
    assert len(steps) == 2 and all(JUDGE_METRICS | metrics <= step.keys() for step in steps)
    assert not any((BATCH_JUDGED | STREAM_JUDGED) - metrics & step.keys() for step in steps)
    assert all(step["reward/judge_unparsed"] == 0 for step in steps)
    records = [json.loads(line) for path in sorted((out / "samples" / "train").glob("*.jsonl"))
               for line in path.read_text().splitlines()]
    assert len(records) == 8  # 2 steps × 2 prompts × rollout.n 2
    return proc, steps, records


def judge_inputs(judge, record) -> torch.Tensor:
    tokenizer = AutoTokenizer.from_pretrained(judge)
    assert record["judge"]["prompt"].startswith("<|im_start|>user\nHere is a question and an answer to it.")
    assert record["output"] in record["judge"]["prompt"] and record["judge"]["parsed"]
    return torch.tensor([tokenizer(record["judge"]["prompt"], add_special_tokens=False)["input_ids"]])


OWN_POOL = ("trainer.n_gpus_per_node=1", "reward.rule_weight=0", "reward.judge.weight=0.5",
            "reward.judge.parse.type=regex", "reward.judge.parse.pattern='(\\d)'",
            "reward.judge.sampling.max_new_tokens=4", "reward.judge.enable_resource_pool=true")


@pytest.mark.parametrize("launcher", ["ray", "torchrun"])
def test_a_judge_on_its_own_pool_alone_rewards_a_grpo_run(setup, tmp_path, judge, launcher):
    command = (sys.executable,) if launcher == "ray" else \
        (sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()))
    proc, steps, records = train(setup, tmp_path / "run", judge, *OWN_POOL, f"trainer.launcher={launcher}",
                                 launcher=command)
    assert "pool main: 1 node × 1 GPUs, one process per GPU hosting actor, rollout\n" in proc.stdout
    assert "pool judge: 1 node × 1 GPUs, one process per GPU hosting judge" in proc.stdout
    for step in steps:
        assert step["critic/score/mean"] == pytest.approx(0.5 * step["reward/judge_score/mean"], abs=1e-6)
    model = AutoModelForCausalLM.from_pretrained(judge, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(judge)
    for record in records:
        ids = judge_inputs(judge, record)
        generated = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False,
                                   eos_token_id=tokenizer.eos_token_id, pad_token_id=0)
        text = tokenizer.decode(generated[0, ids.shape[1]:], skip_special_tokens=True)
        assert record["judge"]["output"] == text
        assert record["judge_score"] == float(re.findall(r"\d", text)[-1])
        assert record["score"] == pytest.approx(0.5 * record["judge_score"], abs=1e-6)


def test_a_judge_beside_a_reward_function_judges_as_responses_finish_under_torchrun(setup, tmp_path, judge):
    reward = tmp_path / "length_reward.py"
    reward.write_text(LENGTH_REWARD)
    torchrun = (sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                str(free_port()))
    _, steps, records = train(setup, tmp_path / "run", judge, f"reward.function={reward}:compute_score",
                              "reward.workers=1", "reward.judge.weight=0.25", "reward.judge.parse.type=yes_no",
                              'reward.judge.parse.yes="Y"', 'reward.judge.parse.no="N"', "rollout.mode=async",
                              launcher=torchrun, metrics=STREAM_JUDGED)
    for step in steps:
        assert step["critic/score/mean"] == pytest.approx(
            step["reward/rule_score/mean"] + 0.25 * step["reward/judge_score/mean"], abs=1e-5)
    model = AutoModelForCausalLM.from_pretrained(judge, dtype=torch.float32).eval()
    yes, no = (AutoTokenizer.from_pretrained(judge).convert_tokens_to_ids(word) for word in ("Y", "N"))
    for record in records:
        with torch.no_grad():
            logits = model(judge_inputs(judge, record)).logits[0, -1, [yes, no]]
        assert record["judge_score"] == pytest.approx(torch.softmax(logits, -1)[0].item(), abs=1e-5)
        assert record["rule_score"] == pytest.approx(len(record["output"]) / 10, abs=1e-6)
        assert record["score"] == pytest.approx(record["rule_score"] + 0.25 * record["judge_score"], abs=1e-5)
