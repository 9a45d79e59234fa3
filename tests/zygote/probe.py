"""tests/test_zygote.py's probe process. `report STATUS`: prints what it started with (torch already imported, i.e. a
forked copy; its arguments, working directory, one environment variable, torch's thread count, whether it leads its
process group) and exits with STATUS.
`wait`: prints its pid, then waits for SIGTERM, which it answers with exit status 7. `hold`: prints its pid, then
sleeps in native code that holds the GIL (as a stuck native call can), so that none of its Python threads runs.
`ray`: prints what an actor of a local Ray cluster (one CPU) found in its worker process (megatron-core already
imported, i.e. a forked copy; torch's thread count). `multiprocessing`: the same of a child started by
multiprocessing's spawn and of one from its forkserver, and their exit codes."""

import json
import os
import signal
import sys
import time

preloaded = "torch" in sys.modules


def found() -> dict:
    import torch

    return {"preloaded": "megatron.core" in sys.modules, "threads": torch.get_num_threads()}


class Reporter:
    def report(self) -> dict:
        return found()


def put_found(queue) -> None:
    queue.put(found())


def ray_report() -> dict:
    import ray

    ray.init(include_dashboard=False, num_cpus=1)
    report = ray.get(ray.remote(num_cpus=1)(Reporter).remote().report.remote())
    ray.shutdown()
    return report


def multiprocessing_report() -> dict:
    import multiprocessing

    reports = {}
    for method in ("spawn", "forkserver"):
        context = multiprocessing.get_context(method)
        queue = context.Queue()
        child = context.Process(target=put_found, args=(queue,))
        child.start()
        reports[method] = {**queue.get(timeout=60), "exitcode": child.join(60) or child.exitcode}
    return reports


def main(mode: str) -> None:
    if mode == "report":
        import torch

        print(json.dumps({"preloaded": preloaded, "argv": sys.argv[1:], "cwd": os.getcwd(),
                          "marker": os.environ.get("PROBE_MARKER"), "threads": torch.get_num_threads(),
                          "group_leader": os.getpgrp() == os.getpid()}))
        sys.exit(int(sys.argv[2]))
    if mode in ("ray", "multiprocessing"):
        print(json.dumps(ray_report() if mode == "ray" else multiprocessing_report()))
        sys.exit(0)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
    print(os.getpid(), flush=True)
    if mode == "hold":
        import ctypes

        ctypes.PyDLL(None).sleep(120)  # a PyDLL call keeps the GIL
    time.sleep(120)


if __name__ == "__main__":  # multiprocessing's children import this file again
    main(sys.argv[1])
