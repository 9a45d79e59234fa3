"""tests/test_zygote.py's probe process. `report STATUS`: prints what it started with (torch already imported, i.e. a
forked copy; its arguments, working directory, one environment variable, torch's thread count) and exits with STATUS.
`wait`: prints its pid, then waits for SIGTERM, which it answers with exit status 7. `hold`: prints its pid, then
sleeps in native code that holds the GIL (as a stuck native call can), so that none of its Python threads runs.
`ray`: prints what an actor of a local Ray cluster (one CPU) found in its worker process (megatron-core already imported,
i.e. a forked copy; torch's thread count)."""

import json
import os
import signal
import sys
import time

preloaded = "torch" in sys.modules

if sys.argv[1] == "report":
    import torch

    print(json.dumps({"preloaded": preloaded, "argv": sys.argv[1:], "cwd": os.getcwd(),
                      "marker": os.environ.get("PROBE_MARKER"), "threads": torch.get_num_threads()}))
    sys.exit(int(sys.argv[2]))
if sys.argv[1] == "ray":
    import ray

    class Reporter:
        def report(self):
            import torch

            return {"preloaded": "megatron.core" in sys.modules, "threads": torch.get_num_threads()}

    ray.init(include_dashboard=False, num_cpus=1)
    print(json.dumps(ray.get(ray.remote(num_cpus=1)(Reporter).remote().report.remote())))
    ray.shutdown()
    sys.exit(0)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
print(os.getpid(), flush=True)
if sys.argv[1] == "hold":
    import ctypes

    ctypes.PyDLL(None).sleep(120)  # a PyDLL call keeps the GIL
time.sleep(120)
