import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO_ROOT, make_model


def test_gradient_offload_frees_the_buffers_between_updates_and_changes_no_number(tmp_path):
    """Between updates, not between the optimizer steps of one update."""
    model = make_model("qwen2", tmp_path / "model")
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    worker = Path(__file__).with_name("offload_worker.py")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", str(worker),
                           str(model), str(tmp_path / "out.json")], capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["kept_bytes_at_build"] > 0 and result["freed_bytes_at_build"] == 0
    for step in result["steps"]:
        assert step["freed_bytes_between_steps"] == 0
        assert step["kept_grad_norm"] == step["freed_grad_norm"] > 0
        assert step["weights_equal"]
    assert result["freed_bytes_within_an_update"] == result["kept_bytes_at_build"]
    assert result["freed_bytes_after_an_update"] == 0
    assert all(freed == kept > 0 for freed, kept in result["update_grad_norms"])
