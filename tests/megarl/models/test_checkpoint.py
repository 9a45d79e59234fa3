"""A checkpoint saved at TP=2 exports (in one process) to exactly the weights the run had, whether it is a training
checkpoint (the actor's here) or weights only (the critic's); an exported critic carries its value head and rebuilds
to the same values. A training checkpoint continues training exactly: weights, Adam state, LR schedule and RNG
states; one from another model shape or tensor-parallel size is refused with the reason."""

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import make_model, run_command

WORKER = Path(__file__).with_name("ckpt_worker.py")


def run(cmd):
    proc = run_command(list(map(str, cmd)), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc


def torchrun(nproc, *args, check=True):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), str(WORKER), *map(str, args)]
    if check:
        return run(cmd)
    return run_command(cmd, timeout=300)


def exported(path: Path) -> dict:
    tensors = {}
    for file in path.glob("*.safetensors"):
        tensors.update(load_file(str(file)))
    return tensors


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """In one launch of two ranks: a step at TP=2 saved (`saved`: its directory and model); two steps at DP=2 (the
    optimizer state sharded over both ranks), a training checkpoint and a third step, then a fresh actor resumed from
    that checkpoint for one step (`resumed`)."""
    saved, resumed = tmp_path_factory.mktemp("save"), tmp_path_factory.mktemp("resume")
    save_model, resume_model = make_model("qwen3", saved / "model"), make_model("qwen2", resumed / "model")
    (save_model / "tokenizer_config.json").write_text("{}")
    torchrun(2, "save", save_model, saved, 2, "--and", "continue", resume_model, resumed, 1,
             "--and", "resume", resume_model, resumed, 1)
    return {"saved": (saved, save_model), "resumed": (resumed, resume_model)}


def test_save_at_tp2_export_in_one_process(two_ranks, tmp_path):
    saved, model = two_ranks["saved"]
    for role in ("actor", "critic"):
        out = tmp_path / f"hf_{role}"
        proc = run([sys.executable, "-m", "megarl.cli", "export", "--checkpoint", saved / role, "--out", out])
        assert f"wrote {out}" in proc.stdout
        expected = load_file(str(saved / f"expected_{role}.safetensors"))
        got = exported(out)
        assert sorted(got) == sorted(expected)
        assert all(torch.equal(got[name], expected[name]) for name in expected), role
        assert (out / "config.json").is_file() and (out / "tokenizer_config.json").is_file()
    original = load_file(str(model / "model.safetensors"))
    actor = exported(tmp_path / "hf_actor")
    assert not torch.equal(actor["model.norm.weight"], original["model.norm.weight"])  # the step was saved
    critic = exported(tmp_path / "hf_critic")
    assert critic["score.weight"].shape == (1, 64) and "lm_head.weight" not in critic

    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(tmp_path / "hf_actor")  # loadable by transformers

    values_at_save = json.loads((saved / "values.json").read_text())
    reload_dir = tmp_path / "reload"
    reload_dir.mkdir()
    torchrun(1, "values", tmp_path / "hf_critic", reload_dir)
    values = json.loads((reload_dir / "values.json").read_text())
    assert max(abs(a - b) for p, q in zip(values, values_at_save) for a, b in zip(p, q)) <= 1e-5


def test_export_of_a_missing_checkpoint_is_an_error(tmp_path):
    proc = run_command([sys.executable, "-m", "megarl.cli", "export", "--checkpoint", str(tmp_path), "--out",
                        str(tmp_path / "o")], timeout=120)
    assert proc.returncode == 2 and "is not a megarl model checkpoint" in proc.stderr


@pytest.fixture(scope="module")
def saved_at_dp2(two_ranks):
    return two_ranks["resumed"]


def test_training_checkpoint_continues_exactly(saved_at_dp2):
    root, model = saved_at_dp2
    assert sorted(p.name for p in (root / "actor").iterdir()) == ["hf", "model", "optimizer", "rng", "role.json"]
    for rank in (0, 1):
        expected, got = torch.load(root / f"continue_{rank}.pt"), torch.load(root / f"resume_{rank}.pt")
        assert got["metrics"] == expected["metrics"]
        assert expected["metrics"]["lr"] == pytest.approx(3 / 4 * 1e-2)  # the third step of a 4-step warmup
        assert all(torch.equal(got["weights"][name], w) for name, w in expected["weights"].items())
        assert torch.equal(got["draw"], expected["draw"])


def test_training_checkpoint_loads_into_another_data_parallel_size(saved_at_dp2, tmp_path):
    root, model = saved_at_dp2
    torchrun(1, "resume", model, root, 1)
    expected, got = torch.load(root / "continue_0.pt"), torch.load(root / "resume_0.pt")
    assert got["metrics"]["lr"] == expected["metrics"]["lr"]
    assert all(torch.allclose(got["weights"][name], w, atol=1e-6) for name, w in expected["weights"].items())


def test_training_checkpoint_of_another_layout_or_shape_is_refused(saved_at_dp2, tmp_path):
    root, _ = saved_at_dp2
    proc = torchrun(2, "load", root / "model", root, 2, check=False)
    assert proc.returncode != 0
    assert "its optimizer state loads only into the same tensor, pipeline and context-parallel sizes" in proc.stderr

    from transformers import Qwen2Config, Qwen2ForCausalLM

    other = tmp_path / "wider"
    Qwen2ForCausalLM(Qwen2Config(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=16)).save_pretrained(other)
    proc = torchrun(1, "load", other, root, 1, check=False)
    assert proc.returncode != 0
    assert "holds a model of another shape than" in proc.stderr
    assert "linear_fc1.weight is" in proc.stderr
