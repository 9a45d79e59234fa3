import json
import math
import sys
from pathlib import Path

import pytest

from tests.helpers import make_model, run_command


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("training")
    model = make_model("qwen2", tmp_path / "model")
    worker = Path(__file__).with_name("training_worker.py")
    proc = run_command([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", str(worker),
                        str(model), str(tmp_path / "out.json")], timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((tmp_path / "out.json").read_text())


def test_warmup_then_cosine_decay(steps):
    lrs = steps["lrs"]
    # Step 0 uses lr 0 (warmup from 0), then 0.5e-3, 1e-3, then cosine from 1e-3 to 1e-4 over the 3 decay steps.
    decay = [1e-4 + 0.5 * (1e-3 - 1e-4) * (1 + math.cos(math.pi * k / 3)) for k in (1, 2, 3)]
    assert lrs == pytest.approx([0.0, 0.5e-3, 1e-3, *decay], rel=1e-6, abs=1e-12)


def test_metrics_are_the_exact_sums_of_the_micro_batches_values(steps):
    given = steps["given"]
    assert len(given) == 3
    for key in ("mean", "last"):
        total = 0.0
        for metrics in given:  # the float64 sum, in micro-batch order
            total += metrics[key]
        assert steps["summed"][key] == total and steps["reduced"][key] == total, key


def test_bf16_gradient_buffers_take_half_the_memory_and_train(steps):
    """`megatron.grad_reduce_in_fp32=false`: the gradient buffers in the weights' bf16, not float32."""
    fp32, bf16 = steps["grad_buffers"]["fp32"], steps["grad_buffers"]["bf16"]
    assert fp32["dtypes"] == ["torch.float32"] and bf16["dtypes"] == ["torch.bfloat16"]
    assert bf16["bytes"] * 2 == fp32["bytes"]
    assert bf16["grad_norm"] == pytest.approx(fp32["grad_norm"], rel=0.05) and bf16["grad_norm"] > 0
