"""benchmarks/logprob_layers.py on CPU (megatron and HF bf16 against the fp32 reference; SGLang needs a GPU): its
per-layer captures line up with the reference's, which a layer off by one or a wrong module would not."""

import json
import subprocess
import sys

from tests.helpers import ENV, REPO_ROOT


def test_megatron_and_hf_bf16_line_up_with_the_fp32_reference_layer_by_layer(tmp_path):
    from megarl.models.shapes import write_random_checkpoint

    model = write_random_checkpoint("qwen3-0.6b", tmp_path / "model", num_hidden_layers=3, hidden_size=64,
                                    intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                    vocab_size=512)
    out = tmp_path / "rows.json"
    subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks/logprob_layers.py"), "--model", str(model),
                    "--impls", "megatron,hf-bf16", "--prompts", "3", "--prompt-len", "16", "--response-len", "24",
                    "--out", str(out)], env=ENV, check=True, capture_output=True, timeout=300)
    [row] = json.loads(out.read_text())
    assert row["what"] == "logprob-layers" and row["layers"] == 3
    for name in ("megatron", "hf-bf16"):
        table = row["layers_rel_err"][name]
        assert [r["layer"] for r in table] == [0, 1, 2]
        # bf16 rounding is ~0.4 % per value; unrelated tensors would differ by ~140 %
        assert all(0 < r[kind] < 0.05 for r in table for kind in ("attn", "mlp", "residual"))
        assert 0 < row["final_norm_rel_err"][name] < 0.05
        assert 1 < row["logprob_vs_fp32"][name]["mult_error"] < 1.01
    assert 1 < row["logprob_vs_fp32"]["megatron-fp32-logits"]["mult_error"] < 1.01
