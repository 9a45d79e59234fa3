import json
import sys
from pathlib import Path

import pytest

from parallel.topology import free_port
from tests.helpers import ENV, make_model, run_command


@pytest.mark.parametrize("family, processes", [("qwen2", 1), ("qwen3_moe", 2)])
def test_gradient_offload_frees_the_buffers_between_updates_and_changes_no_number(tmp_path, family, processes):
    """Between updates, not between the optimizer steps of one update; a mixture-of-experts model's experts' buffers
    (split over two expert-parallel ranks: megatron's expert-parallel buffers) with the rest."""
    model, out = make_model(family, tmp_path / "model"), tmp_path / "out.json"
    proc = run_command([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(processes),
                        "--master-port", str(free_port()), str(Path(__file__).with_name("offload_worker.py")),
                        str(model), str(out)], timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stderr[-6000:]
    result = json.loads(out.read_text())
    assert result["kept_bytes_at_build"] > 0 and result["freed_bytes_at_build"] == 0
    assert (result["kept_expert_bytes_at_build"] > 0) == (family == "qwen3_moe")
    for step in result["steps"]:
        assert step["freed_bytes_between_steps"] == 0
        assert step["kept_grad_norm"] == step["freed_grad_norm"] > 0
        assert step["weights_equal"]
    assert result["freed_bytes_within_an_update"] == result["kept_bytes_at_build"]
    assert result["freed_bytes_after_an_update"] == 0
    assert all(freed == kept > 0 for freed, kept in result["update_grad_norms"])
