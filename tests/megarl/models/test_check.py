import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT, make_model

ENV = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def test_check_model_under_torchrun_reports_hf_parity_and_exact_export(tmp_path):
    model = make_model("qwen2", tmp_path / "model")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "megarl.models.check",
           "--hf", str(model), "--cp", "2", "--json", str(tmp_path / "report.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["cp"] == 2 and report["dtype"] == "fp32" and report["weight_check"] == "exact"
    assert report["logprob_max_abs_diff"] <= 1e-5
    assert json.dumps(report) in proc.stdout


def test_check_model_names_a_bad_directory(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "megarl.cli", "check-model", "--hf", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env=ENV)
    assert proc.returncode == 2 and "is not a HF checkpoint directory" in proc.stderr


def test_check_model_on_transformer_engine_layers_needs_them_installed(tmp_path):
    from megarl.models.accelerators import transformer_engine_available

    if transformer_engine_available():
        pytest.skip("Transformer Engine is installed here: tests/gpu/test_transformer_engine_gpu.py runs this path")
    model = make_model("qwen2", tmp_path / "model")
    proc = subprocess.run([sys.executable, "-m", "megarl.cli", "check-model", "--hf", str(model), "--transformer-impl",
                           "transformer_engine"], capture_output=True, text=True, timeout=120, env=ENV)
    assert proc.returncode == 2
    assert "--transformer-impl transformer_engine needs Transformer Engine, which is not importable here" in proc.stderr
