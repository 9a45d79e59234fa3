import json
import sys

import pytest

from tests.helpers import make_model, run_command


def test_check_model_under_torchrun_reports_hf_parity_and_exact_export(tmp_path):
    model = make_model("qwen2", tmp_path / "model")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "megarl.models.check",
           "--hf", str(model), "--cp", "2", "--json", str(tmp_path / "report.json")]
    proc = run_command(cmd, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["cp"] == 2 and report["dtype"] == "fp32" and report["weight_check"] == "exact"
    assert report["logprob_max_abs_diff"] <= 1e-5
    assert json.dumps(report) in proc.stdout


def test_check_model_names_a_bad_directory(tmp_path):
    proc = run_command([sys.executable, "-m", "megarl.cli", "check-model", "--hf", str(tmp_path)], timeout=120)
    assert proc.returncode == 2 and "is not a HF checkpoint directory" in proc.stderr


def test_check_model_on_transformer_engine_layers_needs_them_installed(tmp_path):
    from megarl.models.accelerators import transformer_engine_available

    if transformer_engine_available():
        pytest.skip("Transformer Engine is installed here: tests/gpu/test_transformer_engine_gpu.py runs this path")
    model = make_model("qwen2", tmp_path / "model")
    proc = run_command([sys.executable, "-m", "megarl.cli", "check-model", "--hf", str(model), "--transformer-impl",
                        "transformer_engine"], timeout=120)
    assert proc.returncode == 2
    assert "--transformer-impl transformer_engine needs Transformer Engine, which is not importable here" in proc.stderr
