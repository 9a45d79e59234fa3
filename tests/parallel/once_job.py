"""Driver for test_controller.py's `Cluster.once` test under torchrun (2 ranks): a value computed once, on rank 0,
reaches every rank's driver code; an exception raised there is raised on every rank. Each rank writes
OUT_DIR/rank{R}.json."""

import json
import os
import sys

from megarl.process_exit import exit_process


def main():
    out_dir = sys.argv[1]
    import torch.distributed as dist

    from parallel.controller import PoolSpec
    from parallel.launcher import start_cluster

    calls = []

    def once():
        calls.append(1)
        return {"pid": os.getpid(), "rank": dist.get_rank()}

    def boom():
        raise ValueError("only rank 0 ran this")

    with start_cluster([PoolSpec("main", (2,))], "torchrun", timeout_s=60) as cluster:
        value = cluster.once(once)
        try:
            cluster.once(boom)
            error = None
        except ValueError as e:
            error = str(e)
        result = {"value": value, "calls": len(calls), "error": error, "pid": os.getpid()}
        with open(os.path.join(out_dir, f"rank{dist.get_rank()}.json"), "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    exit_process(main())
