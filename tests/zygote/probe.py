"""tests/test_zygote.py's probe process. `report STATUS`: prints what it started with (torch already imported, i.e. a
forked copy; its arguments, working directory, one environment variable, torch's thread count) and exits with STATUS.
`wait`: prints its pid, then waits for SIGTERM, which it answers with exit status 7."""

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
signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
print(os.getpid(), flush=True)
time.sleep(120)
