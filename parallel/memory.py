"""Device-wide GPU memory and the node's host memory over time, so that the driver can ask for the peak of each
phase of a step after the step.

Each worker process runs one sampler thread (`start`, from `WorkerHost.join`). Every `INTERVAL_S` it records
(time.time(), device bytes used, host bytes used):
- device: total − free of this process's GPU from cudaMemGetInfo, which counts every process on the device (the
  SGLang engine's scheduler processes included), where torch's allocator statistics see this process only;
- host: the node's used RAM (psutil's `used`);
- reserved: what this process's torch allocator holds on that GPU (its cache included): the trainer's share of the
  device figure, which tells a phase's own tensors from the engine's and the other processes' memory;
- allocated: what this process's live tensors take of that reservation (the rest is the allocator's cache), read
  the same way rather than from torch's peak counter, which other code resets (the weight sync measures its own
  peak with it).
Times are wall-clock so that windows timed by the driver, another process and maybe another node, compare with
them (NTP keeps nodes' clocks within milliseconds, below the interval).

A window's peak is the largest of the samples inside it. The samples just outside its edges are not counted while
it has samples of its own: they belong to the phases before and after, and counting them charged a phase with what
the previous one released at the boundary (an update's cache, a released engine's memory, the reference's weights):
a sample can read the device before a release and the reservation after it. Memory held for less than an interval
may go unseen; phases are longer. A window shorter than the interval, with no sample inside, gets the samples that
bound it: the last one at or before its start and the first one at or after its end. `peaks` takes a sample of its
own first, so a window that ended just before the query has a sample after it. A worker's call samples once more as
it returns (`sample_now`), inside the driver's window of it.

The samples live in a ring of fixed size (the last `RETAINED_S` at the interval, 24 bytes each): memory stays
bounded in processes nobody asks (SFT runs), and older samples are dropped as new ones come. A window that starts
before the oldest sample held gets None: its start is not known.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import torch

INTERVAL_S = 0.01
RETAINED_S = 3600.0

Reader = Callable[[], int]  # bytes used now
Windows = dict[str, tuple[float, float]]  # name: (start, end), time.time() seconds


def device_reader() -> Reader | None:
    """Bytes used on this process's current GPU by every process on it; None without CUDA."""
    if not torch.cuda.is_available():
        return None
    device = torch.cuda.current_device()  # the sampler thread has its own current device: name this one

    def used() -> int:
        free, total = torch.cuda.mem_get_info(device)
        return total - free

    return used


def reserved_reader() -> Reader | None:
    """Bytes torch's caching allocator of this process holds on its GPU; None without CUDA."""
    if not torch.cuda.is_available():
        return None
    device = torch.cuda.current_device()
    return lambda: torch.cuda.memory_reserved(device)


def allocated_reader() -> Reader | None:
    """Bytes this process's live tensors take on its GPU; None without CUDA."""
    if not torch.cuda.is_available():
        return None
    device = torch.cuda.current_device()
    return lambda: torch.cuda.memory_allocated(device)


def host_used() -> int:
    import psutil

    return psutil.virtual_memory().used


def device_stats() -> dict:
    """This process's device name and the node's used memory (the actor answers for its processes' perf metrics)."""
    return {"name": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
            "cpu_memory_used_gb": host_used() / 1e9}


class MemorySampler:
    """A ring of (time, device bytes, host bytes, reserved bytes, allocated bytes) samples; `device_used` None: no
    device to sample (and then no reservation or allocation either)."""

    def __init__(self, device_used: Reader | None, host_used: Reader, clock: Callable[[], float] = time.time,
                 capacity: int = round(RETAINED_S / INTERVAL_S), reserved: Reader | None = None,
                 allocated: Reader | None = None):
        self.device_used, self.host_used, self.clock = device_used, host_used, clock
        self.reserved_used = reserved if device_used is not None else None
        self.allocated_used = allocated if device_used is not None else None
        self.times = np.full(capacity, np.nan)  # NaN: a slot not yet written, outside every window
        self.device = np.zeros(capacity)  # float64 holds byte counts exactly (below 2**53)
        self.host = np.zeros(capacity)
        self.reserved = np.zeros(capacity)
        self.allocated = np.zeros(capacity)
        self.written = 0
        self.lock = threading.Lock()
        self.stopped = threading.Event()

    def sample(self) -> None:
        now = self.clock()
        device = self.device_used() if self.device_used is not None else 0
        host = self.host_used()
        reserved = self.reserved_used() if self.reserved_used is not None else 0
        allocated = self.allocated_used() if self.allocated_used is not None else 0
        with self.lock:
            slot = self.written % len(self.times)
            self.times[slot], self.device[slot], self.host[slot] = now, device, host
            self.reserved[slot], self.allocated[slot] = reserved, allocated
            self.written += 1

    def peaks(self, windows: Windows) -> dict[str, dict[str, int | None]]:
        """Per window, the peak bytes of each series: {"device", "host", "reserved", "allocated"} (None: not known,
        or no device)."""
        self.sample()
        with self.lock:
            return {name: self._peak(start, end) for name, (start, end) in windows.items()}

    def _peak(self, start: float, end: float) -> dict[str, int | None]:
        before, after = self.times[self.times <= start], self.times[self.times >= end]
        if not before.size:
            return {"device": None, "host": None, "reserved": None, "allocated": None}
        chosen = (self.times >= start) & (self.times <= end)
        if not chosen.any():
            last = after.min() if after.size else end  # a window reaching past the query: up to its end
            chosen = (self.times >= before.max()) & (self.times <= last)
        device = int(self.device[chosen].max()) if self.device_used is not None else None
        reserved = int(self.reserved[chosen].max()) if self.reserved_used is not None else None
        allocated = int(self.allocated[chosen].max()) if self.allocated_used is not None else None
        return {"device": device, "host": int(self.host[chosen].max()), "reserved": reserved, "allocated": allocated}

    def run(self, interval_s: float) -> None:
        """Sample every `interval_s` until `stop`; a daemon thread, so it never holds the process open."""
        threading.Thread(target=self._loop, args=(interval_s,), name="memory-sampler", daemon=True).start()

    def _loop(self, interval_s: float) -> None:
        while not self.stopped.wait(interval_s):
            self.sample()

    def stop(self) -> None:
        self.stopped.set()


_SAMPLER: MemorySampler | None = None  # this process's: one per worker process


def start() -> None:
    """Start this process's sampler, once (after its CUDA device is set: the sampler reads that device)."""
    global _SAMPLER
    if _SAMPLER is None:
        _SAMPLER = MemorySampler(device_reader(), host_used, reserved=reserved_reader(), allocated=allocated_reader())
        _SAMPLER.sample()  # a first sample now: windows starting from here on are known
        _SAMPLER.run(INTERVAL_S)


def stop() -> None:
    global _SAMPLER
    if _SAMPLER is not None:
        _SAMPLER.stop()
        _SAMPLER = None


def sample_now() -> None:
    """A sample of this process's now, if its sampler runs: `WorkerHost.call` takes one as each call returns, so the
    memory a call holds at its end is inside the driver's window of it. The thread alone may miss it: the weight sync
    resumes the engine's KV cache in its last milliseconds, so its peak read far below the generation's, which holds
    no more than that (docs/benchmarks.md)."""
    if _SAMPLER is not None:
        _SAMPLER.sample()


def peaks(windows: Windows) -> dict[str, dict[str, int | None]]:
    """This process's device and host peaks in each window (see the module's docstring)."""
    if _SAMPLER is None:
        raise RuntimeError("no memory sampler runs in this process: parallel.memory.start() starts it "
                           "(WorkerHost.join does, in every worker process)")
    return _SAMPLER.peaks(windows)
