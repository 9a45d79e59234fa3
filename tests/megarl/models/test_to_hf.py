"""megatron_to_hf: the pure per-family conversion equals mbridge's export on full tensors, and converting
tensor-parallel shards gives the shards of the HF tensors."""

import pytest
import torch

from megarl.models.to_hf import AttentionShape, megatron_to_hf


@pytest.fixture(scope="module", params=["qwen2", "qwen3", "llama"])
def family(request, tmp_path_factory):
    from tests.helpers import make_model

    return megatron_and_hf(make_model(request.param, tmp_path_factory.mktemp(request.param) / "model"))


def megatron_and_hf(model_dir):
    """Full megatron parameters and the HF checkpoint tensors (mbridge-loaded model, one process)."""
    import subprocess
    import sys

    from tests.helpers import REPO_ROOT

    out = model_dir.parent / "params.pt"
    code = (
        "import sys, torch; from parallel import cpu_compat, topology; cpu_compat.enable();"
        "topology.init_distributed(); topology.init_model_parallel();"
        "from megarl.models.roles import build_reference; from megarl.config.schema import MegatronConfig;"
        f"r = build_reference({str(model_dir)!r}, MegatronConfig());"
        f"torch.save(dict(r.named_parameters()), {str(out)!r})"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT, capture_output=True, timeout=120)
    from megarl.models.bridge import load_hf_config, read_hf_tensors

    return torch.load(out), read_hf_tensors(model_dir), load_hf_config(model_dir)


def test_full_tensors_convert_to_the_checkpoint(family):
    params, hf, config = family
    attention, tied = AttentionShape.of(config), bool(config.tie_word_embeddings)
    converted = {name: t for mname, p in params.items() for name, t, _ in megatron_to_hf(mname, p, attention, tied)}
    assert sorted(converted) == sorted(hf)
    assert all(torch.equal(converted[n], hf[n]) for n in hf)


def test_shards_convert_to_shards(family):
    params, hf, config = family
    attention, tp = AttentionShape.of(config), 2
    for mname, full in params.items():
        if "linear_fc1" in mname:
            gate, up = full.chunk(2)
            shards = [torch.cat([g, u]) for g, u in zip(gate.chunk(tp), up.chunk(tp))]
        elif "linear_qkv" in mname or "word_embeddings" in mname or "output_layer" in mname:
            shards = list(full.chunk(tp))  # whole query groups / vocabulary rows per rank
        elif "linear_proj" in mname or "linear_fc2" in mname:
            shards = list(full.chunk(tp, dim=1))
        else:
            continue
        per_rank = [megatron_to_hf(mname, shard, attention) for shard in shards]
        for i, (name, _, dim) in enumerate(per_rank[0]):
            assert torch.equal(torch.cat([parts[i][1] for parts in per_rank], dim=dim), hf[name]), name


def test_unknown_names_are_an_error():
    with pytest.raises(KeyError, match="no HF name for megatron parameter decoder.layers.0.mystery"):
        megatron_to_hf("decoder.layers.0.mystery", torch.zeros(1), AttentionShape(4, 2, 16))
