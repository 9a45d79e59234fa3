"""megarl.models.forward: torch's cached blocks go back before a pass they were not shaped for, and only then; a bf16
model's output reaches its consumer in bf16."""

from pathlib import Path

import torch

from megarl.models import forward
from tests.helpers import worker_result


def test_the_cache_is_emptied_only_before_a_pass_it_does_not_fit(monkeypatch):
    emptied = []
    blocks = forward.CachedBlocks()
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    passes = [(("actor", True), 100, True),     # the first pass
              (("actor", True), 90, False),     # the same model and kind, smaller: fits in the last one's blocks
              (("actor", False), 90, True),     # an update after a forward pass
              (("actor", False), 90, False),    # its next mini-batch
              (("actor", False), 120, True),    # a larger micro-batch
              (("critic", False), 50, True)]    # another model
    for kind, tokens, empties in passes:
        before = len(emptied)
        blocks.before_pass(kind, tokens)
        assert len(emptied) - before == empties, (kind, tokens)


def test_a_bf16_models_logits_reach_the_log_prob_function_in_bf16():
    result = worker_result(Path(__file__).with_name("output_dtype_worker.py"))
    assert result["dtypes"] == ["torch.bfloat16"] * 2  # Float16Module would have made them float32
    assert result["difference"] == 0.0
