"""The actor's PPO update, the reference pass and the critic's update through the controller (torchrun, gloo,
fp32): every layout computes what one rank computes (metrics, gradient norms, log-probs and values after the
updates), and the first step has PPO's ratio 1."""

import json
import math
import sys

import pytest

from parallel.topology import free_port
from tests.helpers import make_model, run_command

LAYOUTS = {"tp2": ["--tp", "2"], "cp2": ["--cp", "2"], "dp2": []}
CONFIGS = {
    "one-mini-batch": [],
    "two-mini-batches-seq-mean-token-mean-dynamic": ["--mini", "2", "--agg", "seq-mean-token-mean", "--dynamic"],
}
# One process: the reference of each config, rollout correction and tool tokens.
SINGLE = {**CONFIGS, "half": ["--correction", "half"], "reject": ["--correction", "reject"],
          "huge": ["--tool-tokens", "huge"], "zero": ["--tool-tokens", "zero"]}
# Each data-parallel rank splits its own part into mini-batches (verl's semantics): with several mini-batches,
# DP=2 puts other samples into each optimizer step than one rank does, so DP is compared with one mini-batch.
CASES = [(config, layout) for config in sorted(CONFIGS) for layout in sorted(LAYOUTS)
         if layout != "dp2" or config == "one-mini-batch"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model("qwen2", tmp_path_factory.mktemp("update") / "model")


def run(model_dir, out_dir, nproc, jobs: dict[str, list[str]]) -> dict[str, dict]:
    """update_job.py's result for each of `jobs` (name: options), all in one torchrun launch of `nproc` ranks."""
    args = []
    for name, options in jobs.items():
        args += (["--and"] if args else []) + [str(model_dir), str(out_dir / f"{name}.json"), "--gpus", str(nproc),
                                               *options]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-port",
           str(free_port()), "-m", "tests.megarl.workers.update_job", *args]
    proc = run_command(cmd, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return {name: json.loads((out_dir / f"{name}.json").read_text()) for name in jobs}


@pytest.fixture(scope="module")
def single_runs(model_dir, tmp_path_factory):
    return run(model_dir, tmp_path_factory.mktemp("single"), 1, SINGLE)


@pytest.fixture(scope="module")
def layout_runs(model_dir, tmp_path_factory):
    jobs = {f"{config}-{layout}": [*LAYOUTS[layout], *CONFIGS[config]] for config, layout in CASES}
    return run(model_dir, tmp_path_factory.mktemp("layouts"), 2, jobs)


@pytest.mark.parametrize("config, layout", CASES, ids=[f"{c}-{layout}" for c, layout in CASES])
def test_every_layout_updates_like_one_rank(single_runs, layout_runs, config, layout):
    reference, result = single_runs[config], layout_runs[f"{config}-{layout}"]
    assert result["metrics"].keys() == reference["metrics"].keys()
    for key, value in reference["metrics"].items():
        assert result["metrics"][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    for key, value in reference["critic_metrics"].items():
        assert result["critic_metrics"][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    # Adam's first step divides each gradient by its own magnitude, so for the freshly initialised value head
    # (gradients near zero) layout-level float differences move values after the update by a few 1e-5.
    for key, limit in (("after", 1e-5), ("ref_log_prob", 1e-5), ("values", 1e-5), ("values_after", 1e-4)):
        diff = max(abs(a - b) for r, s in zip(result[key], reference[key]) for a, b in zip(r, s))
        assert diff <= limit, (key, diff)


def test_first_step_has_ratio_one(single_runs):
    result = single_runs["one-mini-batch"]  # one optimizer step: its mini-batch sees the unchanged policy
    metrics = result["metrics"]
    assert metrics["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-7)
    assert metrics["actor/pg_clipfrac"] == 0.0 and metrics["actor/pg_clipfrac_lower"] == 0.0
    advantages = [a for row, m in zip(result["advantages"], result["mask"]) for a, k in zip(row, m) if k]
    assert metrics["actor/pg_loss"] == pytest.approx(-sum(advantages) / len(advantages), rel=1e-5)
    assert metrics["actor/kl_loss"] == pytest.approx(math.exp(-0.05) + 0.05 - 1, rel=1e-4)  # low_var_kl of Δ = −0.05
    assert metrics["actor/grad_norm"] > 0 and metrics["actor/entropy"] > 0
    assert result["after"] != result["old"]
    flat = lambda rows: [x for row in rows for x in row]  # noqa: E731
    assert flat(result["ref_log_prob"]) == pytest.approx(flat(result["old"]), abs=1e-6)  # the initial policy
    critic = result["critic_metrics"]
    assert set(critic) == {"critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm",
                           "critic/lr"}
    assert critic["critic/vf_clipfrac"] == 0.0  # first step: predictions equal the old values
    values = [v for row, m in zip(result["values"], result["mask"]) for v, k in zip(row, m) if k]
    assert critic["critic/vpred_mean"] == pytest.approx(sum(values) / len(values), rel=1e-5)
    assert critic["critic/grad_norm"] > 0 and result["values_after"] != result["values"]


def test_rollout_correction_weights_and_rejects_in_the_actors_loss(single_runs):
    plain = single_runs["one-mini-batch"]  # one mini-batch: its loss is taken at the starting weights
    half = single_runs["half"]
    assert half["metrics"]["actor/pg_loss"] == pytest.approx(0.5 * plain["metrics"]["actor/pg_loss"], rel=1e-5)
    for unweighted in ("actor/entropy", "actor/kl_loss", "actor/ppo_kl"):  # IS weights touch only the PG loss
        assert half["metrics"][unweighted] == pytest.approx(plain["metrics"][unweighted], rel=1e-5, abs=1e-7)
    rejected = single_runs["reject"]
    # Nothing is left in the loss (entropy bonus and KL loss included): no gradient at all.
    assert rejected["metrics"]["actor/pg_loss"] == 0 and rejected["metrics"]["actor/grad_norm"] == 0


def test_tool_tokens_carry_no_loss_no_kl_and_no_entropy(single_runs):
    """Multi-turn responses: tool tokens between the model's turns (loss mask 0) with advantages and reference
    log-probs of ±1e6 train exactly as with zeros there: same losses, gradient norm and policy after the update."""
    huge, zero = single_runs["huge"], single_runs["zero"]
    assert huge["metrics"] == zero["metrics"]
    assert huge["after"] == zero["after"]
    assert any(0 in row[:4] and 1 in row[4:] for row in huge["mask"])  # tool tokens sit inside the responses
