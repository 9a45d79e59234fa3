"""GPU (one device): optimizer, parameter and gradient offload move what they say, change no number they should not,
and an offloaded optimizer starts from the loaded weights (Megatron-LM PR #5071)."""

import json
from pathlib import Path

import pytest
import torch

from tests.helpers import GPU0_ENV, TRANSFORMER_IMPLS, run_one_rank

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the device machines)")


@pytest.mark.parametrize("transformer_impl", TRANSFORMER_IMPLS)
def test_offloads_move_state_off_the_gpu_and_keep_loaded_weights(tmp_path, transformer_impl):
    from megarl.models.init_model import write_model

    model = write_model("qwen2.5-0.5b", tmp_path / "model", dtype=torch.bfloat16, num_hidden_layers=4)
    r = run_one_rank(Path(__file__).with_name("offload_worker.py"), model, tmp_path / "ckpt", transformer_impl,
                     out=tmp_path / "out.json", env=GPU0_ENV, timeout=600)
    print(json.dumps(r))
    params = r["params_per_rank"]
    # bf16 weights 2 B, fp32 grads 4 B; the fp32 master copy and the two Adam moments (12 B) leave with the optimizer
    assert r["plain_after_update_bytes"] - r["optimizer_offload_after_update_bytes"] >= 12 * params
    assert r["plain_built_bytes"] - r["param_grad_offload_built_bytes"] >= 0.95 * 6 * params
    assert r["plain_after_update_bytes"] - r["param_grad_offload_after_update_bytes"] >= 0.95 * 6 * params
    assert r["param_offload_weights_equal_plain"]
    assert r["checkpoint_differs_from_hf"] and r["hf_load_kept"] and r["checkpoint_load_kept"]
    assert r["reference_offloaded_bytes"] < 0.05 * 2 * params
    assert r["reference_resident_bytes"] >= 0.95 * 2 * params


def test_a_resident_reference_hands_its_passs_cached_blocks_back(tmp_path):
    """Kept, they would hold memory the next phase needs (the 0.5B PPO recipe's values phase read 27.4 GiB against
    its own 23.1 on an H100); the pass's logits alone are ~0.6 GB."""
    from megarl.models.init_model import write_model

    model = write_model("qwen2.5-0.5b", tmp_path / "model", dtype=torch.bfloat16, num_hidden_layers=2)
    r = run_one_rank(Path(__file__).with_name("reference_cache_worker.py"), model, out=tmp_path / "out.json",
                     env=GPU0_ENV)
    print(json.dumps(r))
    assert r["cached_after_pass_bytes"] - r["cached_before_pass_bytes"] < r["logits_bytes"] / 8, r


def test_weights_coming_back_leave_the_last_passs_cached_blocks_whole():
    """The reference's pass after the actor's: its weights must not land in the actor's freed logits block, or its own
    logits find no block of their size and the pass reserves them twice."""
    from parallel.offload import FrozenState, Residency

    torch.cuda.empty_cache()
    baseline = torch.cuda.memory_reserved()
    weights = torch.nn.Linear(4096, 4096, device="cuda", dtype=torch.bfloat16)  # 32 MiB
    state = FrozenState([weights], Residency(params=True))
    state.offload_params()
    logits_size = 1 << 30
    logits = torch.empty(logits_size, dtype=torch.uint8, device="cuda")
    del logits  # the last pass's largest tensor, freed into torch's cache
    with state.weights_in_use():
        logits = torch.empty(logits_size, dtype=torch.uint8, device="cuda")
        reserved = torch.cuda.memory_reserved() - baseline
    del logits
    assert reserved < logits_size + (64 << 20), reserved / 2**20
