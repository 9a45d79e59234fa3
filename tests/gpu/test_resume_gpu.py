"""GPU (one H200): training checkpoints of the bf16 actor (weights, distributed optimizer with fp32 master
weights, LR scheduler, RNG states) resume to the same step: a run resumed from step 2 of another reproduces its
step 3. The tiny recipe's model and data, the transformers rollout backend on the GPU.

On megatron-core's local layers and on Transformer Engine's where it is installed. Rows for benchmarks/results/ go to
$MEGARL_RESULTS_DIR/resume_gpu.json when it is set."""

import json
import subprocess
import sys

import pytest
import torch

from megarl.models.accelerators import layers_name
from tests.helpers import GPU0_ENV, REPO_ROOT, TRANSFORMER_IMPLS, WALL_CLOCK, record_gpu_row

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the device machines)")


def train(out, *extra):
    from megarl.data.arithmetic import write_arithmetic
    from megarl.models.init_model import write_model

    root = out.parent
    if not (root / "model").exists():
        write_model("tiny", root / "model")
        write_arithmetic(root / "data")
        # a score that differs between responses (the random model never adds right), so the policy moves
        (root / "length_reward.py").write_text("def compute_score(data_source, solution_str, ground_truth, "
                                               "extra_info=None):\n    return len(solution_str) % 7 / 7\n")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "-m", "megarl.train",
           "--recipe", str(REPO_ROOT / "recipes/tiny_cpu_grpo.yaml"), f"model.path={root / 'model'}",
           f"data.train_files=[{root / 'data/train.parquet'}]", "data.val_files=[]", "trainer.n_gpus_per_node=1",
           "trainer.total_training_steps=3", "trainer.save_freq=1", f"trainer.output_dir={out}",
           f"reward.function={root / 'length_reward.py'}:compute_score", *extra]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env=GPU0_ENV)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: {k: v for k, v in r.items() if not k.startswith(WALL_CLOCK)} for r in rows}


@pytest.mark.parametrize("transformer_impl", TRANSFORMER_IMPLS)
def test_a_resumed_run_reproduces_the_next_step(tmp_path, transformer_impl):
    layers = f"actor.megatron.transformer_impl={transformer_impl}"
    whole = train(tmp_path / "whole", layers)
    resumed = train(tmp_path / "resumed", layers, "trainer.resume_mode=resume_path",
                    f"trainer.resume_from_path={tmp_path / 'whole/checkpoints/global_step_2'}")
    assert sorted(resumed) == [3]
    differences = {k: (whole[3][k], resumed[3][k]) for k in whole[3] if whole[3][k] != resumed[3][k]}
    record_gpu_row("resume_gpu.json", {
        "what": "resume", "model_shape": "tiny", "dtype": "bf16", "model_path": layers_name(transformer_impl),
        "backend": "transformers", "step3_metrics": len(whole[3]), "differing": differences,
        "command": f"MEGARL_RESULTS_DIR=$OUT python -m pytest tests/gpu/test_resume_gpu.py -k {transformer_impl}"})
    assert whole[3]["actor/grad_norm"] > 0
    assert not differences, differences
