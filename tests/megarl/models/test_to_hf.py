"""megatron_to_hf: the pure per-family conversion equals mbridge's export on full tensors, and converting
tensor-parallel shards gives the shards of the HF tensors."""

import pytest
import torch

from megarl.models.to_hf import AttentionShape, megatron_to_hf


FAMILIES = ["qwen2", "qwen3", "llama"]


@pytest.fixture(scope="module")
def megatron_params(tmp_path_factory):
    """Per family, a tiny model's directory and its full megatron parameters (mbridge-loaded, all three families in
    one process of their own: megatron's process-wide state stays out of pytest's)."""
    import subprocess
    import sys

    from tests.helpers import REPO_ROOT, make_model

    models = {name: make_model(name, tmp_path_factory.mktemp(name) / "model") for name in FAMILIES}
    out = {name: model_dir.parent / "params.pt" for name, model_dir in models.items()}
    code = (
        "import sys, torch; from parallel import cpu_compat, topology; cpu_compat.enable();"
        "topology.init_distributed(); topology.init_model_parallel();"
        "from megarl.models.roles import build_reference; from megarl.config.schema import MegatronConfig;"
        + "".join(f"torch.save(dict(build_reference({str(models[name])!r}, MegatronConfig()).named_parameters()), "
                  f"{str(out[name])!r});" for name in FAMILIES)
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT, capture_output=True, timeout=180)
    return {name: (models[name], out[name]) for name in FAMILIES}


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, megatron_params):
    """Full megatron parameters, the HF checkpoint tensors and the HF config of one family's tiny model."""
    from megarl.models.bridge import load_hf_config, read_hf_tensors

    model_dir, params = megatron_params[request.param]
    return torch.load(params), read_hf_tensors(model_dir), load_hf_config(model_dir)


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
