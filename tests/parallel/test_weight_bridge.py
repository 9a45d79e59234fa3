"""The weight bridge between pools in three processes: the sender broadcasts buckets of full tensors, and each of two
engine ranks keeps its tensor-parallel slice of every tensor split on a dim (the others whole), bucket by bucket,
until the sender ends the sync."""

import multiprocessing

import torch

from parallel.weight_bridge import WeightBridge
from parallel.topology import free_port

BUCKETS = [[("q.weight", torch.arange(24.0).reshape(6, 4), 0), ("norm.weight", torch.ones(4), None)],
           [("embed.weight", torch.arange(12, dtype=torch.bfloat16).reshape(3, 4), 1)]]


def serve(rank: int, port: int, results) -> None:
    bridge = WeightBridge("127.0.0.1", port, rank, 3, timeout_s=60)
    if rank == 0:
        results[rank] = sum(bridge.send(bucket) for bucket in BUCKETS)
        bridge.finish()
        return
    results[rank] = [[(name, t.tolist(), t.dtype, dim) for name, t, dim in bucket]
                     for bucket in bridge.receive(rank - 1, 2)]


def test_each_engine_rank_keeps_its_slice_of_every_bucket():
    context, port = multiprocessing.get_context("spawn"), free_port()
    with context.Manager() as manager:
        results = manager.dict()
        processes = [context.Process(target=serve, args=(rank, port, results)) for rank in range(3)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=120)
        assert [p.exitcode for p in processes] == [0, 0, 0]
        results = dict(results)
    assert results[0] == sum(t.numel() * t.element_size() for bucket in BUCKETS for _, t, _ in bucket)
    for part in (0, 1):
        expected = [[(name, (t.chunk(2, dim)[part] if dim is not None else t).tolist(), t.dtype, dim)
                     for name, t, dim in bucket] for bucket in BUCKETS]
        assert results[1 + part] == expected
