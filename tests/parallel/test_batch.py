import numpy as np
import pytest
import torch

from parallel.batch import Batch


def make(n=4):
    return Batch(
        {"ids": torch.arange(n * 3).reshape(n, 3), "reward": torch.arange(n, dtype=torch.float)},
        {"uid": [f"p{i}" for i in range(n)], "truth": [[i, i + 1] for i in range(n)]},
    )


def test_fields_are_object_arrays_one_entry_per_sample():
    batch = make()
    assert len(batch) == 4 and batch["truth"].dtype == object and batch["truth"][1] == [1, 2]
    assert sorted(batch.keys()) == ["ids", "reward", "truth", "uid"] and "uid" in batch
    with pytest.raises(ValueError, match="one length per sample"):
        Batch({"a": torch.zeros(3)}, {"b": [1, 2]})
    with pytest.raises(KeyError, match="no 'nope' in this batch"):
        batch["nope"]


def test_chunk_then_concat_is_identity():
    batch = make(6)
    parts = batch.chunk(3)
    assert [len(p) for p in parts] == [2, 2, 2] and list(parts[1]["uid"]) == ["p2", "p3"]
    back = Batch.concat(parts)
    assert torch.equal(back["ids"], batch["ids"]) and list(back["uid"]) == list(batch["uid"])
    with pytest.raises(ValueError, match="cannot split a batch of 6 samples into 4"):
        batch.chunk(4)
    with pytest.raises(ValueError, match="different keys"):
        Batch.concat([make(2), make(2).select(["ids"])])


def test_repeat_interleaved_and_tiled():
    batch = make(2)
    assert list(batch.repeat(3)["uid"]) == ["p0", "p0", "p0", "p1", "p1", "p1"]
    assert batch.repeat(2, interleave=False)["reward"].tolist() == [0.0, 1.0, 0.0, 1.0]


def test_select_columns_rows_and_masks():
    batch = make()
    picked = batch.select(["reward", "uid"], indices=[3, 0])
    assert sorted(picked.keys()) == ["reward", "uid"] and picked["reward"].tolist() == [3.0, 0.0]
    masked = batch.select(indices=batch["reward"] > 1)
    assert list(masked["uid"]) == ["p2", "p3"] and masked["ids"].shape == (2, 3)
    with pytest.raises(KeyError):
        batch.select(["missing"])


def test_a_sliced_batch_owns_its_rows():
    batch = make()
    part = batch.select(indices=slice(1, 3))
    assert list(part["uid"]) == ["p1", "p2"] and part["reward"].tolist() == [1.0, 2.0]
    # Its own storage: sending it to a worker sends two rows, not the four it came from.
    assert part["ids"].untyped_storage().nbytes() == part["ids"].nbytes
    part["reward"][0] = -1.0
    part["uid"][0] = "changed"
    assert batch["reward"][1] == 1.0 and batch["uid"][1] == "p1"


def test_union_adds_columns_and_refuses_conflicts():
    batch = make()
    more = Batch({"adv": torch.ones(4)}, {"uid": np.array([f"p{i}" for i in range(4)], dtype=object)})
    merged = batch.union(more)
    assert sorted(merged.keys()) == ["adv", "ids", "reward", "truth", "uid"]
    with pytest.raises(ValueError, match="tensor 'reward', with different values"):
        batch.union(Batch({"reward": torch.zeros(4)}))
    with pytest.raises(ValueError, match="4 and 2 samples"):
        batch.union(make(2))
    assert batch.keys() == ["ids", "reward", "uid", "truth"]  # inputs are never modified
