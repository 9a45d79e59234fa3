"""GPU (SGLang): a 0.5B-shaped judge (`reward.judge`) on an SGLang engine of its own rewarding GRPO on a 0.5B-shaped
policy alone. Beside the policy, in its process on one GPU (torchrun): yes_no through SGLang's `token_ids_logprob`
(its scores against transformers' softmax over the two words' logits on the logged prompts), and a generating judge
(regex over its digits), after generation and, in the rollout's async mode, as each response finishes (the judge's
engine driven from a thread while the policy's generates). On a second GPU of its own (Ray; skipped on one GPU): the
generating judge. The three cases after generation passed on H200s (rows: benchmarks/results/2026-11-28-judge-gpu.json).

Rows for benchmarks/results/ go to $MEGARL_RESULTS_DIR/judge_gpu.json when it is set: the judge's share of the
step and its tokens/s."""

import json
import subprocess
import sys

import pytest
import torch

from tests.gpu.test_recipes_gpu import one_gpu_grpo_command, read_metrics
from tests.helpers import ENV, GPU0_ENV, REPO_ROOT, record_gpu_row, write_digits_only

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA and SGLang (the device machines)")

JUDGE_ENGINE = ["reward.judge.engine_kwargs.attention_backend=triton",
                "reward.judge.engine_kwargs.sampling_backend=pytorch",
                "reward.judge.engine_kwargs.cuda_graph_max_bs_decode=64"]
PARSES = {"yes_no": ["reward.judge.parse.type=yes_no", 'reward.judge.parse.yes="Y"', 'reward.judge.parse.no="N"'],
          "regex": ["reward.judge.parse.type=regex", "reward.judge.parse.pattern='(\\d)'",
                    "reward.judge.sampling.max_new_tokens=8"]}


# colocated: in the policy's process on its GPU (torchrun); own_pool: on a second GPU of its own (Ray)
# colocated_async: there, each response judged as it finishes (rollout.mode=async)
PLACEMENTS = {"colocated": [], "own_pool": ["reward.judge.enable_resource_pool=true", "trainer.launcher=ray",
                                            "reward.judge.gpu_memory_utilization=0.5"],
              "colocated_async": ["rollout.mode=async"]}


@pytest.mark.parametrize("parse, placement", [("yes_no", "colocated"), ("regex", "colocated"), ("regex", "own_pool"),
                                             ("regex", "colocated_async")])
def test_a_judge_on_sglang_rewards_the_policy(tmp_path, parse, placement):
    from megarl.models.init_model import write_model

    if placement == "own_pool" and torch.cuda.device_count() < 2:
        pytest.skip("a judge on a GPU of its own needs a second GPU (nvidia-h200-x2)")
    judge = write_digits_only(write_model("qwen2.5-0.5b", tmp_path / "judge", seed=1))
    out = tmp_path / "run"
    cmd = one_gpu_grpo_command(tmp_path, out, f"reward.judge.model.path={judge}", "reward.rule_weight=0",
                               "trainer.total_training_steps=3", "trainer.log_samples=-1", *JUDGE_ENGINE,
                               *PARSES[parse], *PLACEMENTS[placement])
    env = GPU0_ENV
    if placement == "own_pool":  # Ray starts the two pools' processes itself, one GPU each
        cmd = [sys.executable, "-m", "megarl.train", *cmd[cmd.index("megarl.train") + 1:]]
        env = {**ENV, "CUDA_VISIBLE_DEVICES": "0,1"}
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    steps = read_metrics(out / "metrics.jsonl")
    records = [json.loads(line) for line in (out / "samples" / "train" / "3.jsonl").read_text().splitlines()]
    judged_tokens = _judge_tokens(judge, records, ("prompt", "output") if parse == "regex" else ("prompt",))
    _record(parse, placement, steps, judged_tokens)
    streams = placement == "colocated_async"
    for step in steps:
        assert step["reward/judge_unparsed"] == 0
        assert ("reward/judge_during_gen" in step) == streams and ("timing_s/judge" in step) != streams
        assert step["critic/score/mean"] == pytest.approx(step["reward/judge_score/mean"], abs=1e-4)
    if parse == "yes_no":
        _check_yes_no_against_transformers(judge, records)


def _record(parse: str, placement: str, steps: list[dict], judged_tokens: int) -> None:
    row = {"what": f"judge-{parse}-{placement}", "dtype": "bf16", "backend": "sglang",
           "command": f"MEGARL_RESULTS_DIR=$OUT python -m pytest tests/gpu/test_judge_gpu.py -k '{parse} and "
                      f"{placement}'",
           "model_shape": "qwen2.5-0.5b policy and judge", "random_init": True,
           "step_s": [s["timing_s/step"] for s in steps], "gen_s": [s["timing_s/gen"] for s in steps]}
    if "timing_s/judge" in steps[-1]:
        row.update({"judge_s": [s["timing_s/judge"] for s in steps],
                    "judge_share_of_step": [s["timing_s/judge"] / s["timing_s/step"] for s in steps],
                    "judge_tokens_per_s_step3": judged_tokens / steps[-1]["timing_s/judge"]})
    else:  # judged within generation: what it added after the engine's last response, and how much came before
        row.update({"judge_after_gen_s": [s["reward/judge_after_gen_s/max"] for s in steps],
                    "judged_during_gen": [s["reward/judge_during_gen"] for s in steps]})
    record_gpu_row("judge_gpu.json", row, gpus_used=2 if placement == "own_pool" else 1)


def _judge_tokens(judge, records, parts) -> int:
    """The tokens the judge read and wrote in a step (its prompts; its outputs where it generated)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(judge)
    return sum(len(tokenizer(r["judge"][part], add_special_tokens=False)["input_ids"])
               for r in records for part in parts)


def _check_yes_no_against_transformers(judge, records) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(judge)
    model = AutoModelForCausalLM.from_pretrained(judge, dtype=torch.float32).cuda().eval()
    words = [tokenizer.convert_tokens_to_ids(word) for word in ("Y", "N")]
    for r in records:
        ids = torch.tensor([tokenizer(r["judge"]["prompt"], add_special_tokens=False)["input_ids"]], device="cuda")
        with torch.no_grad():
            expected = torch.softmax(model(ids).logits[0, -1, words], -1)[0].item()
        assert r["judge_score"] == pytest.approx(expected, abs=0.02), r  # SGLang computes in bf16
