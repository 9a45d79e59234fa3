"""`megarl view RUN_DIR --port P`: serve the viewer page on 127.0.0.1, rereading the run directory on each request,
so a live run's new steps reach the page (which re-fetches /data.json every 10 s)."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from megarl.view.page import build_page, embedded_json
from megarl.view.run_data import RunDirError, read_run

DATA_PATH = "data.json"


def make_server(run_dir: str | Path, port: int) -> ThreadingHTTPServer:
    """A server bound to 127.0.0.1:`port` (0: a free port, read back from `server_address`), not yet serving."""

    class Handler(ViewHandler):
        directory = Path(run_dir)

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


class ViewHandler(BaseHTTPRequestHandler):
    """GET / is the page, GET /data.json the run's data; both are read from `directory` now."""

    directory: Path

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path not in ("/", "/index.html", "/" + DATA_PATH):
            self._send(404, "text/plain", f"no {path} here: the viewer is at /")
            return
        try:
            data = read_run(self.directory)
        except (RunDirError, OSError) as e:  # the run directory changed under a live page
            self._send(500, "text/plain", f"error: {e}")
            return
        if path.endswith(DATA_PATH):
            self._send(200, "application/json", embedded_json(data))
        else:
            self._send(200, "text/html", build_page(data, data_url=DATA_PATH))

    def _send(self, status: int, content_type: str, body: str) -> None:
        encoded = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", f"{content_type}; charset=utf-8")
        self.send_header("Content-Length", str(len(encoded)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(encoded)

    def log_message(self, format: str, *args) -> None:
        """Quiet: the page polls every 10 s, and a line per poll would bury the URL."""
