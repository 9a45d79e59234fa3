import json
import os

import torch
from safetensors.torch import load_file

from megarl.models.hf_files import write_hf_checkpoint


def test_shards_are_written_as_they_fill_and_indexed(tmp_path):
    tensors = [(f"w{i}", torch.full((4,), float(i))) for i in range(5)]  # 16 bytes each
    write_hf_checkpoint(iter(tensors), tmp_path / "sharded", shard_bytes=40)
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == 80
    files = sorted(set(index["weight_map"].values()))
    assert files == ["model-00001.safetensors", "model-00002.safetensors", "model-00003.safetensors"]
    loaded = {}
    for name in files:
        loaded.update(load_file(str(tmp_path / "sharded" / name)))
    assert all(torch.equal(loaded[name], tensor) for name, tensor in tensors)
    write_hf_checkpoint(iter(tensors), tmp_path / "single")
    assert sorted(p.name for p in (tmp_path / "single").iterdir()) == ["model.safetensors"]


def test_model_files_are_readable_as_the_umask_allows(tmp_path):
    write_hf_checkpoint(iter([("w", torch.zeros(2))]), tmp_path / "out")
    assert (tmp_path / "out" / "model.safetensors").stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
