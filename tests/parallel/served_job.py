"""Driver for test_controller.py's served-pool test, under torchrun with 3 processes: a driver pool of 2 ranks and
a served pool of 1 (parallel/served_backend.py). Each driver rank writes OUT_DIR/rank{R}.json: what the served
rank answered, the driver's own call made while a served call was in flight, and the error a failing served call
raised. The served process writes nothing and exits 0 when the driver's cluster shuts down."""

import json
import os
import sys
import time

import torch.distributed as dist

from megarl.process_exit import exit_process
from parallel.dispatch import worker_method
from parallel.worker import Worker


class Served(Worker):
    @worker_method()
    def where(self) -> dict:
        return {"pid": os.getpid(), "rank": dist.get_rank(), "world": dist.get_world_size()}

    @worker_method()
    def slow(self, seconds: float) -> float:
        time.sleep(seconds)
        return time.time()

    @worker_method()
    def fail(self) -> None:
        raise ValueError("the served rank's own error")


class Driver(Worker):
    @worker_method()
    def now(self) -> float:
        return time.time()


def main():
    out_dir = sys.argv[1]
    from parallel.controller import PoolSpec, WorkerError
    from parallel.launcher import start_cluster

    with start_cluster([PoolSpec("main", (2,)), PoolSpec("served", (1,))], "torchrun", timeout_s=60) as cluster:
        served = cluster["served"].spawn("served", Served)
        driver = cluster["main"].spawn("driver", Driver)
        where = served.call(Served.where)
        in_flight = served.submit(Served.slow, 2.0)
        driver_time = driver.call(Driver.now)[0]  # runs while the served rank sleeps
        served_done = in_flight.result()[0]
        try:
            served.call(Served.fail)
            error = None
        except WorkerError as e:
            error = {"role": e.role, "method": e.method, "rank": e.rank, "cause": e.cause}
        result = {"where": where, "driver_before_served": driver_time < served_done, "error": error,
                  "pid": os.getpid(), "world": dist.get_world_size()}
        with open(os.path.join(out_dir, f"rank{dist.get_rank()}.json"), "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    exit_process(main())
