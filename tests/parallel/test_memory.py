"""parallel/memory.py: a window's peak from the samples that bound it (readers and clock injected, so the samples
are known), and the process's real sampler thread on this CPU machine."""

import time

import pytest

from parallel import memory, worker
from parallel.memory import MemorySampler
from parallel.worker import Worker, WorkerHost


class Recorded:
    """A clock and readers that replay (time, device bytes, host bytes) rows, one row per sample."""

    def __init__(self, rows):
        self.rows, self.at = rows, -1

    def clock(self):
        self.at += 1
        return self.rows[self.at][0]

    def device(self):
        return self.rows[self.at][1]

    def host(self):
        return self.rows[self.at][2]


def sampler_of(rows, with_device=True, capacity=100):
    """A sampler holding every row but the last, which its query samples."""
    recorded = Recorded(rows)
    sampler = MemorySampler(recorded.device if with_device else None, recorded.host, recorded.clock, capacity)
    for _ in rows[:-1]:
        sampler.sample()
    return sampler


ROWS = [(0.0, 10, 100), (1.0, 50, 100), (2.0, 20, 300), (3.0, 30, 200), (4.0, 5, 100), (9.0, 1, 1)]


def test_a_window_takes_the_samples_inside_it_or_without_any_those_bounding_it():
    peaks = sampler_of(ROWS).peaks({"edges": (1.0, 3.0), "between": (1.5, 3.5), "short": (2.2, 2.8),
                                    "instant": (0.5, 0.5)})
    assert peaks["edges"] == {"device": 50, "host": 300, "reserved": None, "allocated": None}  # samples at 1, 2, 3
    # Samples at 2 and 3: the 50 at 1 is the phase before's (it counted here before, charging the window with it).
    assert peaks["between"] == {"device": 30, "host": 300, "reserved": None, "allocated": None}
    assert peaks["short"] == {"device": 30, "host": 300, "reserved": None, "allocated": None}  # no sample inside: those at 2 and 3
    assert peaks["instant"] == {"device": 50, "host": 100, "reserved": None, "allocated": None}  # the samples at 0 and 1


def test_the_query_samples_so_a_window_that_just_ended_is_bounded():
    peaks = sampler_of(ROWS).peaks({"last": (4.5, 5.0)})
    assert peaks["last"] == {"device": 5, "host": 100, "reserved": None, "allocated": None}  # the sample at 4 and the query's own at 9


def test_a_window_whose_start_is_no_longer_held_has_no_peak():
    # a ring of 3: after 6 samples it holds t = 3, 4 and the query's 9
    peaks = sampler_of(ROWS, capacity=3).peaks({"dropped": (1.0, 3.5), "held": (3.0, 4.0)})
    assert peaks["dropped"] == {"device": None, "host": None, "reserved": None, "allocated": None}
    assert peaks["held"] == {"device": 30, "host": 200, "reserved": None, "allocated": None}


def test_without_a_device_only_host_peaks():
    assert sampler_of(ROWS, with_device=False).peaks({"w": (1.0, 2.0)})["w"] == {"device": None, "host": 300, "reserved": None, "allocated": None}


def test_the_process_sampler_thread_samples_host_memory_on_cpu():
    with pytest.raises(RuntimeError, match="no memory sampler runs"):
        memory.peaks({})
    memory.start()
    try:
        start = time.time()
        time.sleep(0.1)
        peaks = memory.peaks({"phase": (start, time.time()), "instant": (start, start)})
        assert memory._SAMPLER.written >= 5  # the thread samples every INTERVAL_S
    finally:
        memory.stop()
    for window in ("phase", "instant"):
        assert peaks[window]["device"] is None and peaks[window]["host"] > 0


def test_the_reservation_and_the_allocation_are_sampled_with_the_device():
    recorded = Recorded(ROWS)
    sampler = MemorySampler(recorded.device, recorded.host, recorded.clock, 100, reserved=lambda: 7,
                            allocated=lambda: 5)
    sampler.sample()
    assert sampler.peaks({"w": (0.0, 0.0)})["w"] == {"device": 10, "host": 100, "reserved": 7, "allocated": 5}
    no_device = MemorySampler(None, recorded.host, recorded.clock, 100, reserved=lambda: 7, allocated=lambda: 5)
    no_device.sample()
    peaks = no_device.peaks({"w": (2.0, 2.0)})["w"]
    assert peaks["reserved"] is None and peaks["allocated"] is None


class Resumes(Worker):
    """A call that holds its most memory in its last moment, after the sampler's last tick inside it (the weight
    sync resuming the engine's KV cache)."""

    def __init__(self, device: list[int]):
        self.device = device

    def sync(self):
        memory._SAMPLER.sample()  # the thread's last tick inside the call
        self.device[0] = 90


def test_a_workers_call_samples_what_it_holds_as_it_returns(monkeypatch):
    device = [10]
    monkeypatch.setattr(memory, "_SAMPLER", MemorySampler(lambda: device[0], lambda: 1))
    memory._SAMPLER.sample()
    host = WorkerHost(0, 1)
    host.add_role("rollout", Resumes, (device,), {})
    start = time.time()
    host.call("rollout", "sync", (), {})
    end = time.time()
    device[0] = 20  # the next phase's
    assert memory.peaks({"sync": (start, end)})["sync"]["device"] == 90
