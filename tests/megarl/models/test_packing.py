import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from megarl.models.packing import pack_sequences, token_budget_micro_batches


def test_pack_without_cp_has_no_padding():
    batch = pack_sequences([[1, 2, 3], [4, 5], [6]])
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5, 6]]
    assert batch.labels.tolist() == [[2, 3, 0, 5, 0, 0]]
    params = batch.packed_seq_params
    assert params.qkv_format == "thd" and params.cu_seqlens_q.tolist() == [0, 3, 5, 6]
    assert params.cu_seqlens_q_padded.tolist() == [0, 3, 5, 6] and params.max_seqlen_q == 3
    assert [t.tolist() for t in batch.unpack(batch.input_ids)] == [[1, 2, 3], [4, 5], [6]]


def test_a_row_padded_to_a_total_pads_after_its_last_sample():
    batch = pack_sequences([[1, 2, 3], [4, 5]], token_fields={"mask": [torch.ones(2), torch.ones(1)]}, total=8)
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5, 0, 0, 0]]
    assert batch.token_fields["mask"].tolist() == [[1, 1, 0, 1, 0, 0, 0, 0]]
    params = batch.packed_seq_params
    assert params.cu_seqlens_q.tolist() == [0, 3, 5] and params.cu_seqlens_q_padded.tolist() == [0, 3, 8]
    assert [t.tolist() for t in batch.unpack(batch.input_ids)] == [[1, 2, 3], [4, 5]]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 13), min_size=1, max_size=5), st.sampled_from([2, 3, 4]))
def test_context_parallel_chunks_reassemble_to_the_full_sequences(lengths, cp):
    seqs = [torch.arange(100 * i + 1, 100 * i + 1 + n) for i, n in enumerate(lengths)]
    ranks = [pack_sequences(seqs, cp, r) for r in range(cp)]
    full = ranks[0].to_global([b.input_ids for b in ranks])
    assert [t.tolist() for t in ranks[0].unpack(full)] == [s.tolist() for s in seqs]
    labels = ranks[0].to_global([b.labels for b in ranks])
    for seq, got in zip(seqs, ranks[0].unpack(labels)):
        assert got[:-1].tolist() == seq[1:].tolist()
    for b in ranks:
        assert all(p % (2 * cp) == 0 for p in b.padded_lengths)
        assert b.input_ids.shape[1] == sum(b.padded_lengths) // cp


def test_rank_holds_load_balanced_chunks():
    batch = pack_sequences([torch.arange(8)], cp_size=2, cp_rank=0)
    assert batch.input_ids.tolist() == [[0, 1, 6, 7]]  # chunks 0 and 3 of 4
    batch = pack_sequences([torch.arange(8)], cp_size=2, cp_rank=1)
    assert batch.input_ids.tolist() == [[2, 3, 4, 5]]
    with pytest.raises(ValueError):
        pack_sequences([])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=0, max_size=30), st.integers(1, 80))
def test_token_budget_micro_batches(lengths, budget):
    batches = token_budget_micro_batches(lengths, budget)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert sum(lengths[i] for i in b) <= budget or len(b) == 1
    assert len(batches) <= len(lengths) and all(batches)
    loads = [sum(lengths[i] for i in b) for b in batches]
    assert loads == sorted(loads, reverse=True)  # the largest first: its cached blocks serve the rest


def test_token_budget_balances():
    lengths = [10, 9, 8, 1, 1, 1]
    batches = token_budget_micro_batches(lengths, 15)
    assert sorted(sum(lengths[i] for i in b) for b in batches) == [10, 10, 10]
    assert token_budget_micro_batches([5, 5, 5, 5], 10) == [[0, 2], [1, 3]]
    assert token_budget_micro_batches([2], 1) == [[0]]


def test_token_fields_follow_the_same_chunks():
    seqs = [torch.arange(1, 6), torch.arange(10, 13)]
    advantages = [torch.tensor([0.5, 1.5, 2.5, 3.5]), torch.tensor([7.0, 8.0])]
    ranks = [pack_sequences(seqs, 2, r, token_fields={"adv": advantages}) for r in range(2)]
    full = ranks[0].to_global([b.token_fields["adv"] for b in ranks])
    got = ranks[0].unpack(full)
    assert got[0][:-1].tolist() == advantages[0].tolist() and got[1][:-1].tolist() == advantages[1].tolist()
    with pytest.raises(ValueError, match="token field 'adv' of sample 1 has 3 values, not 2"):
        pack_sequences(seqs, token_fields={"adv": [advantages[0], torch.zeros(3)]})
