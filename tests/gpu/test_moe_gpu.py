"""GPU (two GPUs, SGLang rollout): GRPO on a small random-weight Qwen3-MoE (8 experts, 2 per token) with its experts
split over both GPUs (`actor.megatron.expert_model_parallel_size=2`, megatron's all-to-all token dispatcher), each
GPU's SGLang engine serving the whole model, every expert streamed to it from the GPU that holds it; the engine's
log-probs agree with the trainer's each step (rollout/logprob_mult_error, bf16); the same run again with router replay
(`actor.router_replay.mode=R3`), its mismatch and routing flips in the row beside the first's; and both again with one
SGLang engine over both GPUs, its experts split over them as the actor's are; an actor whose parameters, gradients and
optimizer state leave the GPUs between its calls (the experts' expert-parallel buffers with the rest), and one over two
pipeline stages. Skipped on one GPU.

Two failures came before the pass: SGLang's `direct` weight load copies by parameter name and its FusedMoE layers
have no per-expert names (the experts go through the model's own loader, megarl/rollout/sglang_engine.py), and
torch.compile cannot trace megatron's token dispatch (MoE layers stay eager, megarl/models/compiled_layer.py).

Rows for benchmarks/results/ go to $MEGARL_RESULTS_DIR/moe_gpu.json when it is set."""

import sys

import pytest
import torch

from parallel.topology import free_port
from tests.helpers import (REPO_ROOT, SGLANG, make_model, make_tokenizer, overrides, read_metrics, record_gpu_row,
                           run_command, write_tiny_rl_setup)

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs and SGLang (nvidia-h200-x2)")

VARIED_REWARD = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" \
                "    return sum(map(ord, solution_str)) % 7 / 7\n"


def moe_setup(root):
    write_tiny_rl_setup(root)
    tokenizer = make_tokenizer(root / "model")
    make_model("qwen3_moe", root / "model", vocab_size=512, hidden_size=256, num_attention_heads=4,
               num_key_value_heads=2, head_dim=64, num_experts=8, moe_intermediate_size=256,
               eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    (root / "reward.py").write_text(VARIED_REWARD)
    return root


def grpo(root, out, *extra: str) -> list[dict]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "-m", "megarl.train",
           *overrides(root, out, "algorithm.adv_estimator=grpo", f"reward.function={root / 'reward.py'}:compute_score",
                      "trainer.total_training_steps=4", "actor.megatron.expert_model_parallel_size=2",
                      "data.train_batch_size=4", "rollout.n=4", "data.max_response_length=32",
                      "rollout.max_logprob_mult_error=1.2",
                      *SGLANG, *extra)]
    proc = run_command(cmd, timeout=480, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return read_metrics(out)


def test_grpo_with_experts_split_over_two_gpus_on_sglang(tmp_path):
    """The run without and with router replay (R3: the trainer routes each token to the experts SGLang chose),
    the train–inference mismatch of each in the row."""
    root = moe_setup(tmp_path / "setup")
    steps = grpo(root, tmp_path / "run")
    replayed = grpo(root, tmp_path / "r3", "actor.router_replay.mode=R3")
    assert len(steps) == len(replayed) == 4
    for step in steps + replayed:
        assert step["rollout/logprob_mult_error"] < 1.05 and step["actor/grad_norm"] > 0
    record_gpu_row("moe_gpu.json", {
        "what": "moe-grpo-ep2", "dtype": "bf16", "backend": "sglang",
        "command": "MEGARL_RESULTS_DIR=$OUT python -m pytest tests/gpu/test_moe_gpu.py",
        "model_shape": "qwen3_moe: 2 layers, hidden 256, 8 experts (2 per token), expert width 256",
        "random_init": True, "expert_model_parallel_size": 2,
        **{key: [s[key] for s in steps] for key in ("timing_s/step", "timing_s/gen", "timing_s/update_actor",
                                                      "timing_s/update_weights", "rollout/logprob_mult_error")},
        **{f"router_replay_r3/{key}": [s[key] for s in replayed]
           for key in ("timing_s/step", "rollout/logprob_mult_error", "rollout/routing_flip_frac")}},
        gpus_used=2)


def test_grpo_on_one_sglang_engine_of_two_gpus_with_expert_parallelism(tmp_path):
    """One SGLang engine over both GPUs (`rollout.tensor_model_parallel_size=2`), its experts split over them whole
    (SGLang's `ep_size`) as the actor's are (EP 2): each GPU's experts reach its engine rank from the training rank on
    the same GPU, none travels (parallel/reshard.py, `EngineExperts`); the engine's log-probs agree with the
    trainer's, without and with router replay."""
    root = moe_setup(tmp_path / "setup")
    engine_ep = ("rollout.tensor_model_parallel_size=2",)
    steps = grpo(root, tmp_path / "run", *engine_ep)
    replayed = grpo(root, tmp_path / "r3", *engine_ep, "actor.router_replay.mode=R3")
    assert len(steps) == len(replayed) == 4
    for step in steps + replayed:
        assert step["rollout/logprob_mult_error"] < 1.05 and step["actor/grad_norm"] > 0
        assert step["update_weights/bytes_received_gb"] == 0  # every expert and shard was on its engine rank's GPU
    record_gpu_row("moe_gpu.json", {
        "what": "moe-grpo-ep2-sglang-tp2-ep2", "dtype": "bf16", "backend": "sglang",
        "command": "MEGARL_RESULTS_DIR=$OUT python -m pytest tests/gpu/test_moe_gpu.py",
        "model_shape": "qwen3_moe: 2 layers, hidden 256, 8 experts (2 per token), expert width 256",
        "random_init": True, "expert_model_parallel_size": 2, "rollout_tensor_parallel_size": 2,
        "rollout_expert_parallel_size": 2,
        **{key: [s[key] for s in steps] for key in ("timing_s/step", "timing_s/gen", "timing_s/update_actor",
                                                      "timing_s/update_weights", "update_weights/stream_s",
                                                      "rollout/logprob_mult_error")},
        **{f"router_replay_r3/{key}": [s[key] for s in replayed]
           for key in ("timing_s/step", "rollout/logprob_mult_error", "rollout/routing_flip_frac")}},
        gpus_used=2)


def test_grpo_on_an_offloaded_moe_actor_and_over_two_pipeline_stages(tmp_path):
    """Parameter, gradient and optimizer offload of the MoE actor at EP 2 (megatron's expert-parallel buffers leave
    with the others, parallel/offload.py), and the model at PP 2 (a layer per GPU, megatron's all-to-all dispatcher
    with variable sequence lengths): the engine's log-probs agree with the trainer's each step, the updates move."""
    root = moe_setup(tmp_path / "setup")
    offloaded = grpo(root, tmp_path / "offload", "actor.megatron.param_offload=true",
                     "actor.megatron.grad_offload=true", "actor.megatron.optimizer_offload=true")
    staged = grpo(root, tmp_path / "pp2", "actor.megatron.expert_model_parallel_size=1",
                  "actor.megatron.pipeline_model_parallel_size=2")
    assert len(offloaded) == len(staged) == 4
    for step in offloaded + staged:
        assert step["rollout/logprob_mult_error"] < 1.05 and step["actor/grad_norm"] > 0
    record_gpu_row("moe_gpu.json", {
        "what": "moe-grpo-offload-and-pp2", "dtype": "bf16", "backend": "sglang",
        "command": "MEGARL_RESULTS_DIR=$OUT python -m pytest tests/gpu/test_moe_gpu.py",
        "model_shape": "qwen3_moe: 2 layers, hidden 256, 8 experts (2 per token), expert width 256",
        "random_init": True,
        **{f"ep2_offload/{key}": [s[key] for s in offloaded] for key in (
            "timing_s/step", "timing_s/update_actor", "rollout/logprob_mult_error")},
        **{f"pp2/{key}": [s[key] for s in staged] for key in (
            "timing_s/step", "timing_s/update_actor", "rollout/logprob_mult_error")}},
        gpus_used=2)
