"""LoRA on the megatron actor (megarl/models/lora.py), CPU, gloo, fp32: with B at zero the actor is the base model
and its reference; every layout (TP2, PP2, CP2) computes what one rank computes, before and after an update;
only the adapters train; a training checkpoint holds the adapters alone and resumes exactly; `megarl export` merges
them into HF weights that transformers and PEFT's own loader reproduce. On a Qwen3-MoE the attention layers take the
adapters (the experts none): its experts split over two ranks train as on one, resume exactly and export merged."""

import json
import sys

import pytest
import torch

from megarl.plan.shape import ModelShape
from tests.helpers import ENV, LAYOUTS, REPO_ROOT, make_model, max_abs, run_command, run_layouts
from tests.megarl.models.dist_worker import sequences

WORKER = REPO_ROOT / "tests/megarl/models/lora_worker.py"
LENGTHS = (9, 14, 6, 11, 8, 13, 7, 10)
TARGET_WEIGHTS = [f"decoder.layers.{i}.{layer}.weight" for i in range(2) for layer in
                  ("mlp.linear_fc1", "mlp.linear_fc2", "self_attention.linear_proj", "self_attention.linear_qkv")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The single-rank run, and the 2-rank layouts in one launch (a launch each would add a process start-up each)."""
    root = tmp_path_factory.mktemp("lora")
    model_dir = make_model("qwen3", root / "model")  # tied embeddings, QK norms
    results = {"single": run_layouts(WORKER, [(model_dir, root / "single.json", (1, 1, 1), [])], nproc=1)[0]}
    layouts = [(model_dir, root / "tp2.json", LAYOUTS["tp2"], ["--checkpoint", root / "ckpt"])]
    layouts += [(model_dir, root / f"{name}.json", LAYOUTS[name], []) for name in ("pp2", "cp2")]
    results.update(zip(("tp2", "pp2", "cp2"), run_layouts(WORKER, layouts, nproc=2, timeout=600)))
    return root, results


def test_zero_b_is_the_base_model_and_the_reference(runs):
    _, results = runs
    for name, run in results.items():
        assert max_abs(run["initial"], run["full_model"]) <= 1e-6, name
        assert max_abs(run["base"], run["full_model"]) <= 1e-6, name
        assert max_abs(run["adapted"], run["base"]) > 1e-2, name  # the adapters act once B is not zero
        assert max_abs(run["base_after_b"], run["full_model"]) <= 1e-6, name  # disabled: the base again


def test_every_layout_computes_what_one_rank_computes(runs):
    _, results = runs
    single = results["single"]
    for name, run in results.items():
        assert max_abs(run["adapted"], single["adapted"]) <= 1e-5, name
        assert run["grad_norm"] == pytest.approx(single["grad_norm"], rel=1e-5), name
        assert max_abs(run["after_step"], single["after_step"]) <= 1e-5, name


def test_only_the_adapters_train(runs):
    _, results = runs
    shape = ModelShape.from_dir(runs[0] / "model")
    targets = ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
    for name, run in results.items():
        assert run["trained_parameters"] and all(n.rsplit(".", 1)[-1] in ("lora_A", "lora_B")
                                                 for n in run["trained_parameters"]), name
        assert run["frozen_changed"] == [], name
        own = [n for n in TARGET_WEIGHTS if name != "pp2" or n.startswith("decoder.layers.0.")]  # rank 0's stage
        assert run["merged_changed"] == own, name  # the engine's weights: the adapted layers alone
        assert not any("lora" in n for n in run["merged_names"]), name
    # The optimizer holds this rank's adapters, as the memory plan counts them.
    tp, pp = LAYOUTS["tp2"][0], LAYOUTS["pp2"][1]
    assert results["single"]["optimizer_numel"] == shape.lora_gpu_parameters(1, 1, 4, targets)
    assert results["tp2"]["optimizer_numel"] == shape.lora_gpu_parameters(tp, 1, 4, targets)
    assert results["pp2"]["optimizer_numel"] == shape.lora_gpu_parameters(1, pp, 4, targets)


def test_checkpoint_holds_the_adapters_and_resumes_exactly(runs):
    root, results = runs
    tp2 = results["tp2"]
    assert tp2["restored"] == tp2["after_step"]
    assert tp2["restored_second_step"] == tp2["second_step"]
    role = json.loads((root / "ckpt/role.json").read_text())
    assert role["lora"] == {"rank": 4, "alpha": 8.0, "dropout": 0.0, "target_modules": [
        "linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]}
    assert role["base_model"] == str((root / "model").resolve())
    from megatron.core import dist_checkpointing

    saved = dist_checkpointing.load_tensors_metadata(str(root / "ckpt/model"))
    assert saved and all(key.rsplit(".", 1)[-1] in ("lora_A", "lora_B") for key in saved)


def hf_logprobs(model, seqs):
    out = []
    with torch.no_grad():
        for seq in seqs:
            logits = model(seq[None]).logits[0, :-1].float()
            out.append(torch.log_softmax(logits, -1).gather(-1, seq[1:, None])[:, 0].tolist())
    return out


def test_export_merges_the_adapters_and_writes_a_peft_adapter(runs, tmp_path):
    """The TP2 checkpoint (saved after one update) exported at one rank: HF transformers on the merged weights, and
    PEFT on the base model with the adapter directory, give the megatron actor's log-probs."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    root, results = runs
    out = tmp_path / "hf"
    proc = run_command([sys.executable, "-m", "megarl.cli", "export", "--checkpoint", str(root / "ckpt"), "--out",
                        str(out)], timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((out / "adapter/adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8.0
    assert config["target_modules"] == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                               "down_proj"])
    seqs, expected = sequences(128, LENGTHS), results["tp2"]["after_step"]
    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert max_abs(hf_logprobs(merged, seqs), expected) <= 1e-5
    base = AutoModelForCausalLM.from_pretrained(root / "model", dtype=torch.float32)
    adapted = PeftModel.from_pretrained(base, out / "adapter")
    assert max_abs(hf_logprobs(adapted, seqs), expected) <= 1e-5


def test_export_of_a_lora_checkpoint_names_a_missing_base(runs, tmp_path):
    root, _ = runs
    proc = run_command([sys.executable, "-m", "megarl.cli", "export", "--checkpoint", str(root / "ckpt"), "--out",
                        str(tmp_path / "hf"), "--base-model", str(tmp_path / "nowhere")], timeout=120, env=ENV)
    assert proc.returncode == 2
    assert "holds LoRA adapters of the base model" in proc.stderr and "--base-model" in proc.stderr


ATTENTION = ["linear_qkv", "linear_proj"]


@pytest.fixture(scope="module")
def moe_runs(tmp_path_factory):
    """A tiny Qwen3-MoE (4 experts, 2 a token) with adapters on its attention, in one launch of two ranks: every
    expert on each rank (data parallel), then the experts split over them (EP2, with a checkpoint)."""
    root = tmp_path_factory.mktemp("lora_moe")
    model_dir = make_model("qwen3_moe", root / "model")
    targets = ["--targets", *ATTENTION]
    layouts = [(model_dir, root / "dp2.json", LAYOUTS["dp2"], targets),
               (model_dir, root / "ep2.json", LAYOUTS["dp2"], [*targets, "--ep", "2", "--checkpoint", root / "ckpt"])]
    return root, dict(zip(("dp2", "ep2"), run_layouts(WORKER, layouts, nproc=2, timeout=600)))


def test_an_moe_actor_adapts_its_attention_alone_and_splits_its_experts_as_one_rank(moe_runs):
    root, results = moe_runs
    for name, run in results.items():
        assert max_abs(run["initial"], run["full_model"]) <= 1e-6, name
        assert max_abs(run["base"], run["full_model"]) <= 1e-6, name
        assert max_abs(run["adapted"], run["base"]) > 1e-2, name
        adapted = {n.rsplit(".", 2)[-2] for n in run["trained_parameters"]}
        assert adapted == set(ATTENTION) and run["frozen_changed"] == [], name
        assert run["merged_changed"] == [f"decoder.layers.{i}.self_attention.{layer}.weight" for i in range(2)
                                         for layer in ("linear_proj", "linear_qkv")], name
    dp2, ep2 = results["dp2"], results["ep2"]
    assert max_abs(ep2["adapted"], dp2["adapted"]) <= 1e-5
    assert ep2["grad_norm"] == pytest.approx(dp2["grad_norm"], rel=1e-5)
    assert max_abs(ep2["after_step"], dp2["after_step"]) <= 1e-5
    # Each rank's optimizer holds half the adapters: the distributed optimizer splits them over the two data-parallel
    # ranks, the expert-parallel layout as the other.
    adapters = ModelShape.from_dir(root / "model").lora_gpu_parameters(1, 1, 4, ATTENTION)
    assert ep2["optimizer_numel"] == dp2["optimizer_numel"] == adapters // 2
    assert ep2["restored"] == ep2["after_step"] and ep2["restored_second_step"] == ep2["second_step"]


def test_an_moe_actors_adapters_export_merged(moe_runs, tmp_path):
    """The EP2 checkpoint exported at one rank: HF transformers' Qwen3-MoE on the merged weights gives the actor's
    log-probs after its update."""
    from transformers import AutoModelForCausalLM

    root, results = moe_runs
    out = tmp_path / "hf"
    proc = run_command([sys.executable, "-m", "megarl.cli", "export", "--checkpoint", str(root / "ckpt"), "--out",
                        str(out)], timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "adapter/adapter_config.json").read_text())["target_modules"] == [
        "k_proj", "o_proj", "q_proj", "v_proj"]
    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert max_abs(hf_logprobs(merged, sequences(128, LENGTHS)), results["ep2"]["after_step"]) <= 1e-5
