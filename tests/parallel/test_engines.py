"""Engine slots: which training shards each GPU's rollout engine rank needs, and which ranks it gathers from."""

import pytest

from parallel.engines import engine_slots


def test_equal_tp_converts_in_place():
    slots = engine_slots(4, train_tp=2, rollout_tp=2)
    assert [s.engine for s in slots] == [0, 0, 1, 1] and [s.engine_rank for s in slots] == [0, 1, 0, 1]
    assert all(s.gather_ranks == (rank,) and s.parts == 1 for rank, s in enumerate(slots))
    assert slots[2].engine_ranks == (2, 3)


def test_smaller_rollout_tp_strides_engines_and_gathers_in_sub_groups():
    slots = engine_slots(8, train_tp=4, rollout_tp=2)
    # Training TP group 0..3 hosts 2 engines on GPUs {0, 2} and {1, 3}: engine rank j needs shards 2j, 2j+1.
    assert [s.engine_ranks for s in slots[:4]] == [(0, 2), (1, 3), (0, 2), (1, 3)]
    assert [s.engine_rank for s in slots[:4]] == [0, 0, 1, 1]
    assert [s.gather_ranks for s in slots[:4]] == [(0, 1), (0, 1), (2, 3), (2, 3)]
    assert [s.engine for s in slots] == [0, 1, 0, 1, 2, 3, 2, 3]
    one = engine_slots(2, train_tp=2, rollout_tp=1)
    assert [(s.engine, s.engine_ranks, s.gather_ranks) for s in one] == [(0, (0,), (0, 1)), (1, (1,), (0, 1))]


def test_larger_rollout_tp_slices_within_the_training_group():
    slots = engine_slots(4, train_tp=1, rollout_tp=2)
    assert [(s.engine, s.engine_rank, s.gather_ranks, s.part, s.parts) for s in slots] == [
        (0, 0, (0,), 0, 2), (0, 1, (1,), 1, 2), (1, 0, (2,), 0, 2), (1, 1, (3,), 1, 2)]
    slots = engine_slots(4, train_tp=2, rollout_tp=4)
    assert [s.gather_ranks for s in slots] == [(0, 1), (0, 1), (2, 3), (2, 3)] and [s.part for s in slots] == [0, 1, 2, 3]


def test_sizes_must_divide():
    with pytest.raises(ValueError, match="must divide one another"):
        engine_slots(6, train_tp=2, rollout_tp=3)
