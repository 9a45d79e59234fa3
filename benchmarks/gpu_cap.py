"""A smaller GPU on a larger one: one ballast process per GPU takes all but `cap` bytes of the device's free memory
for as long as a run lasts, so the run's processes (the trainer and the SGLang engine, which sizes its KV cache from
the free memory it finds) see what a card of that size gives them, and whatever exceeds it fails as it would there.
Device-wide figures measured during the run include the ballast: `Ballast.bytes` per GPU is what to subtract."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

HOLD = """
import sys, torch
device, cap = int(sys.argv[1]), int(sys.argv[2])
torch.cuda.set_device(device)
free, total = torch.cuda.mem_get_info()
if free <= cap:
    sys.exit(f"GPU {device} has {free / 2**30:.2f} GiB free, not more than the cap of {cap / 2**30:.2f} GiB")
held = torch.empty(free - cap, dtype=torch.uint8, device=device)
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
print(total - free, flush=True)
sys.stdin.read()
"""


@dataclass
class Ballast:
    processes: list[subprocess.Popen]
    bytes: dict[int, int]  # GPU index: device memory the ballast process holds (its CUDA context included)

    @property
    def pids(self) -> set[int]:
        return {p.pid for p in self.processes}

    def release(self) -> None:
        for process in self.processes:
            process.stdin.close()
            process.wait(timeout=60)


def hold_all_but(cap_bytes: int, gpus: int) -> Ballast:
    """Leave `cap_bytes` free on each of the first `gpus` GPUs until `release`."""
    processes, held = [], {}
    for index in range(gpus):
        process = subprocess.Popen([sys.executable, "-c", HOLD, str(index), str(cap_bytes)], text=True,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=os.environ.copy())
        processes.append(process)
        line = process.stdout.readline()
        if not line:
            Ballast(processes[:-1], held).release()
            raise RuntimeError(f"the ballast on GPU {index} did not start (exit code {process.wait()})")
        held[index] = int(line)
    return Ballast(processes, held)
