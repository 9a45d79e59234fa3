"""GRPO on a tiny Qwen3-MoE (4 experts, 2 per token) under torchrun on two ranks: with its experts split over both
(`actor.megatron.expert_model_parallel_size=2`) the run equals the one with every expert on each rank — the same
samples, losses, KL, gradient norm — and the rollout engine's log-probs equal the trainer's at every step, so the
actor's experts reach the engine (each broadcast from the rank that holds it) after each update; so does the run with a
layer on each of two pipeline stages, and the one with each sequence over two context-parallel ranks. The prompts differ
in length, so the two ranks' micro-batches do too (padded to the same tokens for the CPU's all-gather dispatcher).
The router's load-balancing and z losses (`moe_aux_loss_coeff`, `moe_z_loss_coeff`) change the first step's
gradients from the same samples. Resumed from its step-2 checkpoint (each rank's experts saved and loaded under
their global numbers), the split run's step 3 comes out the same. Router replay (R3) trains on the engine's routing.
PPO's critic on the MoE checkpoint (a value head on its layers) splits its experts too, trains as on every rank and
resumes exactly."""

import re
import sys

import datasets
import pytest

from parallel.topology import free_port
from tests.helpers import WALL_CLOCK, make_chat_moe, overrides, read_metrics, run_command, write_tiny_rl_setup

# A score that differs between responses, so that every step updates the experts.
VARIED_REWARD = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" \
                "    return sum(map(ord, solution_str)) % 7 / 7\n"
COMPARED = ("critic/score/mean", "actor/pg_loss", "actor/ppo_kl", "actor/grad_norm", "actor/entropy")


@pytest.fixture(scope="module")
def moe_setup(tmp_path_factory):
    root = write_tiny_rl_setup(tmp_path_factory.mktemp("moe"))
    make_chat_moe(root / "model")
    questions = ["What is 1 + 2? ####", "What is 10 + 20 + 30 + 40, all added up? ####"] * 3
    rows = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": q}],
             "reward_model": {"ground_truth": "3"}} for q in questions]
    datasets.Dataset.from_list(rows).to_parquet(str(root / "train.parquet"))
    (root / "reward.py").write_text(VARIED_REWARD)
    return root


def grpo(setup, out, ep: int, *extra: str, estimator: str = "grpo") -> list[dict]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "-m", "megarl.train",
           *overrides(setup, out, f"algorithm.adv_estimator={estimator}",
                      f"reward.function={setup / 'reward.py'}:compute_score", "trainer.total_training_steps=3",
                      f"actor.megatron.expert_model_parallel_size={ep}", *extra)]
    proc = run_command(cmd, timeout=480)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    (out / "console.txt").write_text(proc.stdout)
    return read_metrics(out)


def rank_parameters(out, model: int = 0) -> int:
    """The parameters megatron reports on rank 0 of the run at `out`, for the `model`-th model it built (the actor
    first, then a critic)."""
    return int(re.findall(r"number of parameters on \(tensor, pipeline\) model parallel rank \(0, 0\): (\d+)",
                          (out / "console.txt").read_text())[model])


@pytest.fixture(scope="module")
def split_run(moe_setup, tmp_path_factory):
    out = tmp_path_factory.mktemp("ep2")
    return out, grpo(moe_setup, out, 2, "trainer.save_freq=2")


@pytest.fixture(scope="module")
def split(split_run):
    return split_run[1]


@pytest.fixture(scope="module")
def whole_run(moe_setup, tmp_path_factory):
    """Every expert on each rank (two data-parallel ranks)."""
    out = tmp_path_factory.mktemp("ep1")
    return out, grpo(moe_setup, out, 1)


def assert_trains_alike(steps: list[dict], whole: list[dict]) -> None:
    assert len(steps) == len(whole) == 3
    for step, step_whole in zip(steps, whole):
        for key in COMPARED:
            assert step[key] == pytest.approx(step_whole[key], rel=1e-3, abs=1e-6), key
        assert step["actor/grad_norm"] > 0
        assert step["rollout/logprob_mult_error"] == pytest.approx(1.0, abs=1e-5)


def test_experts_split_over_two_ranks_train_as_on_one(split_run, split, whole_run):
    # Each rank holds half the experts: 2 layers × 2 experts × (gate, up and down of 64 × 32) fewer parameters.
    assert rank_parameters(whole_run[0]) - rank_parameters(split_run[0]) == 2 * 2 * 3 * 64 * 32
    assert_trains_alike(split, whole_run[1])
    assert all(step["actor/ppo_kl"] != 0 for step in split)  # the first mini-batch's update moved the experts


# Pretraining texts shorter and longer than the RL samples (PPO-ptx): on the pipeline's pass of one length the RL
# micro-batches are padded to the longest text's, or the texts' to the longest RL sample's.
PTX_TEXTS = ["one two", "what is four and five " * 12, "the answer is nine", "seven eight nine ten " * 9]


def one_mini_batch_with_ptx(setup) -> tuple[str, ...]:
    """The step's samples in one update, however the ranks split them, and PPO-ptx's loss on the texts."""
    return ("actor.ppo_mini_batch_size=2", f"data.ptx_files=[{setup / 'ptx.parquet'}]", "data.ptx_prompt_key=null",
            "data.ptx_response_key=text", "actor.ptx_coef=0.5")


@pytest.fixture(scope="module")
def one_mini_batch(moe_setup, tmp_path_factory):
    """Two data-parallel ranks, each step one update."""
    datasets.Dataset.from_list([{"text": text} for text in PTX_TEXTS]).to_parquet(str(moe_setup / "ptx.parquet"))
    return grpo(moe_setup, tmp_path_factory.mktemp("dp2"), 1, *one_mini_batch_with_ptx(moe_setup))


@pytest.mark.parametrize("layout", ["pipeline_model_parallel_size", "context_parallel_size"])
def test_pipeline_stages_and_context_parallel_ranks_train_as_data_parallel_ones(moe_setup, one_mini_batch, layout,
                                                                                 tmp_path):
    """A layer on each of two pipeline stages (on CPU every micro-batch of a pass, RL and pretraining ones, is padded
    to one length for the all-gather dispatcher: packing.pipeline_needs_one_length), or each sequence split over two
    context-parallel ranks: the same samples, losses and engine log-probs as two data-parallel ranks."""
    steps = grpo(moe_setup, tmp_path / layout, 1, *one_mini_batch_with_ptx(moe_setup), f"actor.megatron.{layout}=2")
    assert_trains_alike(steps, one_mini_batch)
    assert [step["actor/ptx_loss"] for step in steps] == \
        pytest.approx([step["actor/ptx_loss"] for step in one_mini_batch], rel=1e-4)


def test_the_routers_losses_join_the_update(moe_setup, split, tmp_path):
    losses = grpo(moe_setup, tmp_path / "losses", 2, "trainer.total_training_steps=1",
                  "actor.megatron.moe_aux_loss_coeff=0.5", "actor.megatron.moe_z_loss_coeff=0.1")
    assert losses[0]["critic/score/mean"] == split[0]["critic/score/mean"]  # the same samples
    assert losses[0]["actor/grad_norm"] != pytest.approx(split[0]["actor/grad_norm"], rel=1e-3)


def test_a_split_run_resumes_from_its_checkpoint_to_the_same_step(moe_setup, split_run, tmp_path):
    out, split = split_run
    resumed = grpo(moe_setup, tmp_path / "resumed", 2, "trainer.resume_mode=resume_path",
                   f"trainer.resume_from_path={out / 'checkpoints' / 'global_step_2'}")
    assert [m["step"] for m in resumed] == [3]
    compared = {key: value for key, value in split[2].items() if not key.startswith(WALL_CLOCK)}
    assert {key: resumed[0][key] for key in compared} == compared


def test_router_replay_runs_grpo_on_the_engines_routing(moe_setup, split, tmp_path):
    """R3 over EP 2, with full recompute (the update's routers run again in the backward). The engine holds the
    actor's weights: the same samples, the old-log-prob pass under the engine's routing gives the engine's log-probs,
    and the actor's routers agree with the engine's. (The step's second mini-batch trains on the rollout's routing
    after the first one's update changed the routers, so the losses differ from the run without replay.)"""
    replayed = grpo(moe_setup, tmp_path / "r3", 2, "trainer.total_training_steps=1", "actor.router_replay.mode=R3",
                    "actor.megatron.recompute_granularity=full")
    assert replayed[0]["critic/score/mean"] == split[0]["critic/score/mean"]
    assert replayed[0]["rollout/logprob_mult_error"] == pytest.approx(1.0, abs=1e-5)
    assert replayed[0]["rollout/routing_flip_frac"] == pytest.approx(0.0, abs=0.02)
    assert replayed[0]["actor/ppo_kl"] != 0 and 0 < replayed[0]["actor/grad_norm"] < float("inf")


CRITIC_COMPARED = ("critic/values/mean", "critic/vf_loss", "critic/grad_norm", "critic/advantages/max",
                   "actor/pg_loss", "actor/grad_norm")


def ppo(setup, out, ep: int, *extra: str) -> list[dict]:
    return grpo(setup, out, ep, f"critic.megatron.expert_model_parallel_size={ep}", "trainer.total_training_steps=2",
                *extra, estimator="gae")


def test_a_critic_on_the_moe_model_splits_its_experts_trains_as_on_one_and_resumes(moe_setup, tmp_path):
    split = ppo(moe_setup, tmp_path / "ep2", 2, "trainer.save_freq=1")
    whole = ppo(moe_setup, tmp_path / "ep1", 1)
    assert rank_parameters(tmp_path / "ep1", 1) - rank_parameters(tmp_path / "ep2", 1) == 2 * 2 * 3 * 64 * 32
    for step, step_whole in zip(split, whole, strict=True):
        for key in CRITIC_COMPARED:
            assert step[key] == pytest.approx(step_whole[key], rel=1e-3, abs=1e-6), key
    assert split[0]["critic/values/mean"] != split[1]["critic/values/mean"]  # the first update moved the critic
    resumed = ppo(moe_setup, tmp_path / "resumed", 2, "trainer.resume_mode=resume_path",
                  f"trainer.resume_from_path={tmp_path / 'ep2' / 'checkpoints' / 'global_step_1'}")
    compared = {key: value for key, value in split[1].items() if not key.startswith(WALL_CLOCK)}
    assert {key: resumed[0][key] for key in compared} == compared
