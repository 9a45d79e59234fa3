"""`megarl view RUN_DIR [--port P | --out FILE.html]`: a training run's metric curves, its samples' PPO stages and
its validation samples across steps, in the browser.

Exit codes: 0 the page was written (or the server was stopped with Ctrl-C), 2 a wrong RUN_DIR, output or port."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from megarl.process_exit import exit_process
from megarl.view.page import build_page
from megarl.view.run_data import RunDirError, read_run
from megarl.view.server import make_server

DEFAULT_PORT = 8765


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="megarl view", description="View a training run in the browser: metric curves, each step's samples "
        "through the PPO stages, validation samples across steps. The page needs no network access.",
        epilog="exit codes: 0 done, 2 a wrong RUN_DIR, output or port")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run's output directory (trainer.output_dir), "
                        "holding metrics.jsonl")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--port", type=int, default=DEFAULT_PORT,
                       help=f"serve a live page on 127.0.0.1:PORT (default {DEFAULT_PORT}; 0: a free port)")
    where.add_argument("--out", metavar="FILE.html", help="write the page to FILE.html once, instead of serving")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        data = read_run(args.run_dir)
    except RunDirError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.out:
        return write_page(data, Path(args.out))
    return serve(args.run_dir, args.port)


def write_page(data: dict, out: Path) -> int:
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(build_page(data), encoding="utf-8")
    except OSError as e:
        print(f"error: cannot write {out} ({e.strerror}): pass another --out", file=sys.stderr)
        return 2
    print(f"wrote {out} ({out.stat().st_size} bytes): open it in a browser")
    return 0


def serve(run_dir: str, port: int) -> int:
    try:
        server = make_server(run_dir, port)
    except OSError as e:
        print(f"error: cannot serve on 127.0.0.1:{port} ({e.strerror}): pass another --port (0: a free one)",
              file=sys.stderr)
        return 2
    host, bound_port = server.server_address[:2]
    # Flushed: a script or a test reads the URL from a pipe while the server runs.
    print(f"serving {run_dir} at http://{host}:{bound_port}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    exit_process(main())
