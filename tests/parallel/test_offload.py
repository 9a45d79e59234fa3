import os
from pathlib import Path

from tests.helpers import REPO_ROOT, make_model, run_one_rank


def test_gradient_offload_frees_the_buffers_between_updates_and_changes_no_number(tmp_path):
    """Between updates, not between the optimizer steps of one update."""
    model = make_model("qwen2", tmp_path / "model")
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = run_one_rank(Path(__file__).with_name("offload_worker.py"), model, out=tmp_path / "out.json", env=env)
    assert result["kept_bytes_at_build"] > 0 and result["freed_bytes_at_build"] == 0
    for step in result["steps"]:
        assert step["freed_bytes_between_steps"] == 0
        assert step["kept_grad_norm"] == step["freed_grad_norm"] > 0
        assert step["weights_equal"]
    assert result["freed_bytes_within_an_update"] == result["kept_bytes_at_build"]
    assert result["freed_bytes_after_an_update"] == 0
    assert all(freed == kept > 0 for freed, kept in result["update_grad_norms"])
