"""A checkpoint's manifest: the size and CRC-32 of every file in a `global_step_{k}` directory, written by the
driver as the last file of a save (megarl/trainer/checkpoint.py) and checked before a resume. A file cut short
(a full disk, a killed copy) or changed since then is found on the driver, named, before any worker starts,
rather than failing inside megatron's loader as a bare EOFError on every retry. The files a complete checkpoint
holds (each role's metadata, every rank's shards and RNG files: what its writers list) must all be there for a
manifest to be written, so an incomplete checkpoint never gets one and never verifies.

    global_step_{k}/manifest.json   {"format": 1, "checksum": "crc32", "files": {"actor/model/__0_0.distcp": [size,
                                     crc32], ..., "trainer_state.json": [size, crc32]}}

CRC-32 (zlib) guards against accidents, not tampering, which is all a checkpoint needs: it runs at about 2.8 GB/s
on one core where blake2b runs at 0.8 (xxh3 is faster still, but megarl does not depend on it), and zlib releases
the GIL, so files are checked in parallel threads (docs/checkpoints.md has the measurements). Sizes are compared
first: a stat per file finds a truncation without reading anything.
"""

from __future__ import annotations

import json
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple, Sequence

MANIFEST = "manifest.json"
_CHUNK = 16 << 20  # large reads: per-call overhead vanishes, memory stays small
_THREADS = min(8, os.cpu_count() or 1)


class Verdict(NamedTuple):
    problem: str | None  # the first file that does not match its entry, and how; None when every file does
    files: int  # the files checked; 0 when there is no manifest (a checkpoint saved before megarl wrote them)
    size: int  # their bytes


class IncompleteCheckpoint(RuntimeError):
    """A checkpoint lacks files its writers said it must hold: it gets no manifest, so it never verifies."""


def build_manifest(directory: Path, required: Sequence[str]) -> str:
    """The manifest of every file under `directory` but itself, as JSON text; `required`: the files (relative paths)
    a complete checkpoint holds, each of which must be there."""
    missing = [name for name in required if not (directory / name).is_file()]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise IncompleteCheckpoint(f"the checkpoint in {directory} is incomplete, {shown} missing (was another run "
                                   "writing to the same trainer.output_dir?): it is not committed, and the last "
                                   "complete checkpoint stays the one to resume from")
    paths = sorted(p for p in directory.rglob("*") if p.is_file() and p != directory / MANIFEST)
    with ThreadPoolExecutor(_THREADS) as pool:
        sums = list(pool.map(_crc32, paths))
    lines = ",\n".join(f"{json.dumps(path.relative_to(directory).as_posix())}: [{size}, {crc}]"
                        for path, (size, crc) in zip(paths, sums))
    return f'{{"format": 1, "checksum": "crc32", "files": {{\n{lines}\n}}}}\n'  # one file a line, for people reading it


def verify(directory: Path) -> Verdict:
    """Check the files of `directory` against its manifest."""
    if not (directory / MANIFEST).is_file():
        return Verdict(None, 0, 0)
    try:
        files = {name: (int(size), int(crc)) for name, (size, crc) in
                 json.loads((directory / MANIFEST).read_text())["files"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return Verdict(f"{MANIFEST} cannot be read ({type(e).__name__}: {e})", 0, 0)
    total = sum(size for size, _ in files.values())
    for name, (size, _) in files.items():
        try:
            actual = (directory / name).stat().st_size
        except FileNotFoundError:
            return Verdict(f"{name} is missing", len(files), total)
        except OSError as e:
            return Verdict(f"{name} cannot be read ({e.strerror})", len(files), total)
        if actual != size:
            return Verdict(f"{name} has {actual} bytes, the manifest says {size}", len(files), total)
    with ThreadPoolExecutor(_THREADS) as pool:
        problems = pool.map(_mismatch, [directory] * len(files), files, [crc for _, crc in files.values()])
        return Verdict(next((p for p in problems if p), None), len(files), total)


def _mismatch(directory: Path, name: str, crc: int) -> str | None:
    try:
        _, actual = _crc32(directory / name)
    except OSError as e:
        return f"{name} cannot be read ({e.strerror})"
    return None if actual == crc else f"{name} fails its CRC-32 check (its bytes changed after the save)"


def _crc32(path: Path) -> tuple[int, int]:
    size, crc = 0, 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            size, crc = size + len(chunk), zlib.crc32(chunk, crc)
    return size, crc
