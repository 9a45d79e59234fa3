"""A checkpoint saved at TP=2 exports (in one process) to exactly the weights the run had; an exported
critic carries its value head and rebuilds to the same values."""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from tests.helpers import REPO_ROOT
from tests.megarl.models.test_layouts import make_model

WORKER = Path(__file__).with_name("ckpt_worker.py")
ENV = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc


def torchrun(nproc, *args):
    return run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), str(WORKER), *map(str, args)])


def exported(path: Path) -> dict:
    tensors = {}
    for file in path.glob("*.safetensors"):
        tensors.update(load_file(str(file)))
    return tensors


def test_save_at_tp2_export_in_one_process(tmp_path):
    model = make_model("qwen3", tmp_path / "model")
    (model / "tokenizer_config.json").write_text("{}")
    torchrun(2, "save", model, tmp_path, 2)
    for role in ("actor", "critic"):
        out = tmp_path / f"hf_{role}"
        proc = run([sys.executable, "-m", "megarl.cli", "export", "--checkpoint", tmp_path / role, "--out", out])
        assert f"wrote {out}" in proc.stdout
        expected = load_file(str(tmp_path / f"expected_{role}.safetensors"))
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

    values_at_save = json.loads((tmp_path / "values.json").read_text())
    reload_dir = tmp_path / "reload"
    reload_dir.mkdir()
    torchrun(1, "values", tmp_path / "hf_critic", reload_dir)
    values = json.loads((reload_dir / "values.json").read_text())
    assert max(abs(a - b) for p, q in zip(values, values_at_save) for a, b in zip(p, q)) <= 1e-5


def test_export_of_a_missing_checkpoint_is_an_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "megarl.cli", "export", "--checkpoint", str(tmp_path), "--out",
                           str(tmp_path / "o")], capture_output=True, text=True, timeout=120, env=ENV)
    assert proc.returncode == 2 and "is not a megarl model checkpoint" in proc.stderr
