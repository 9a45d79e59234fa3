"""Zero the GPU code a shared library carries for every architecture but the kept ones (in place).

    python3 fatbin_keep_arch.py LIB.so 90 [ARCH ...]

A CUDA fat binary (.nv_fatbin section) holds, per compiled translation unit, one container of
entries (cubin ELF or PTX), each tagged with its SM architecture. The driver picks one entry per
container by those tags; an H200 (sm_90) can run only the sm_90/sm_90a cubins (SASS is not
compatible across major versions and this library carries no PTX). So the payloads (cubins,
plain or compressed -- the driver inflates only the entry it picks) of all
other entries are overwritten with zeros: headers, sizes and offsets stay as they are (nothing
in the ELF moves), and the zeros compress to nothing. Refuses (exit 1) and leaves the file
untouched when a container would be left with no kept entry, when an entry for another arch
is PTX (a newer GPU could JIT it, so it is not dead weight) or neither a cubin nor compressed,
or when the section does not parse cleanly.
Prints the bytes zeroed per arch. Stdlib only.
"""
import mmap
import struct
import subprocess
import sys

MAGIC = 0xBA55ED50
ZSTD = b"\x28\xb5\x2f\xfd"  # entries of CUDA >= 12.8 fatbins are often zstd-compressed cubins


def fatbin_section(path):
    out = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if "] .nv_fatbin " in line + " ":
            f = line.split("]", 1)[1].split()
            return int(f[3], 16), int(f[4], 16)
    raise SystemExit(f"{path}: no .nv_fatbin section")


def plan(m, off, size, keep):
    """Return (ranges to zero, stats); raise SystemExit on anything unexpected."""
    pos, end, zero, stats = off, off + size, [], {}
    n_cont = 0
    while pos < end:
        magic, _ver, hsz, fsz = struct.unpack_from("<IHHQ", m, pos)
        if magic != MAGIC:  # padding between containers
            if any(m[pos:pos + 8]):
                raise SystemExit(f"unexpected bytes at 0x{pos:x} (not a fatbin header, not padding)")
            pos += 8
            continue
        n_cont += 1
        p, cend, kept = pos + hsz, pos + hsz + fsz, 0
        while p < cend:
            kind, _ev, ehsz, psize = struct.unpack_from("<HHIQ", m, p)
            arch = struct.unpack_from("<I", m, p + 28)[0]
            flags = struct.unpack_from("<Q", m, p + 40)[0]
            if ehsz < 64 or p + ehsz + psize > cend:
                raise SystemExit(f"bad entry header at 0x{p:x}")
            if arch in keep:
                kept += 1
            else:
                if kind != 2:
                    raise SystemExit(f"entry kind {kind} (PTX?) for sm_{arch} at 0x{p:x}: refusing")
                head = bytes(m[p + ehsz:p + ehsz + 4])
                if head not in (b"\x7fELF", ZSTD) and not flags & 0x2000:  # plain, zstd, or lz4 (0x2000)
                    raise SystemExit(f"entry for sm_{arch} at 0x{p:x} is neither a cubin nor compressed")
                zero.append((p + ehsz, psize))
                stats[arch] = stats.get(arch, 0) + psize
            p += ehsz + psize
        if kept == 0:
            raise SystemExit(f"container at 0x{pos:x} has no entry for {sorted(keep)}: refusing")
        pos = cend
    return zero, stats, n_cont


def main():
    path, keep = sys.argv[1], {int(a) for a in sys.argv[2:]}
    if not keep:
        raise SystemExit("usage: fatbin_keep_arch.py LIB.so ARCH [ARCH ...]")
    off, size = fatbin_section(path)
    with open(path, "r+b") as f:
        m = mmap.mmap(f.fileno(), 0)
        zero, stats, n_cont = plan(m, off, size, keep)
        for start, n in zero:
            m[start:start + n] = bytes(n)
        m.flush()
        m.close()
    total = sum(stats.values())
    detail = " ".join(f"sm_{a}:{b / 1e6:.1f}MB" for a, b in sorted(stats.items()))
    print(f"[fatbin] {path}: {n_cont} containers, kept sm_{sorted(keep)}, zeroed {total / 1e6:.1f} MB ({detail})")


if __name__ == "__main__":
    main()
