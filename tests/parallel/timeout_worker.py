"""Run under torchrun with 2 ranks: rank 1 never joins the all-reduce; rank 0 writes how long it waited
before the collective failed (the default group's timeout, here 3 s)."""

import json
import sys
import time

import torch
import torch.distributed as dist

from parallel import cpu_compat, topology

cpu_compat.enable()  # a CPU test: megatron through the CPU shim
topology.init_distributed(timeout_s=3)
if dist.get_rank() == 1:
    time.sleep(8)
    sys.exit(0)
start = time.monotonic()
try:
    dist.all_reduce(torch.ones(1))
    outcome = "completed"
except Exception as e:  # gloo raises on timeout
    outcome = f"{type(e).__name__}: {e}"
with open(sys.argv[1], "w") as f:
    json.dump({"seconds": time.monotonic() - start, "outcome": outcome}, f)
