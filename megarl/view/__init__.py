"""`megarl view`: a training run's step viewer in the browser, one self-contained HTML page.

Modules, one job each: run_data (the run directory read into one JSON-able dict), page (the HTML with plotly,
viewer.css and viewer.js inlined), server (the live page on 127.0.0.1), command (the CLI)."""

from megarl.view.page import build_page
from megarl.view.run_data import RunDirError, read_run

__all__ = ["RunDirError", "build_page", "read_run"]
