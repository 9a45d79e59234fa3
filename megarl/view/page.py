"""The viewer's one HTML page: plotly's offline bundle, viewer.css, viewer.js and the run's data inlined, so the
page opens without network access (a saved file, or a tunnel to a training node that reaches nothing else)."""

from __future__ import annotations

import html
import json
from functools import lru_cache
from importlib import resources
from typing import Any

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title} · megarl view</title>
<style>{css}</style>
</head>
<body>
<header id="header"><h1>{title}</h1><div id="summary"></div></header>
<section id="curves"><h2>Metrics</h2><div id="panels" class="grid"></div></section>
<section id="iteration">
  <h2>PPO iteration</h2>
  <div class="pickers">
    <label>step <select id="step-picker"></select></label>
    <label>sample <select id="sample-picker"></select></label>
  </div>
  <p id="train-note" class="note"></p>
  <div id="stages"></div>
</section>
<section id="validation">
  <h2>Validation across steps</h2>
  <div class="pickers"><label>validation sample <select id="val-picker"></select></label></div>
  <p id="val-note" class="note"></p>
  <div id="val-sample"></div>
</section>
<script>{plotly}</script>
<script type="application/json" id="run-data">{data}</script>
<script>const DATA_URL = {data_url};</script>
<script>{js}</script>
</body>
</html>
"""


def build_page(data: dict[str, Any], data_url: str | None = None) -> str:
    """The page showing `data` (megarl.view.run_data.read_run); with `data_url` it re-fetches the data from there
    every few seconds, so a live run's new steps appear."""
    return PAGE.format(title=html.escape(str(data["experiment_name"])), css=_asset("viewer.css"),
                       plotly=_plotly_js(), data=embedded_json(data), data_url=json.dumps(data_url),
                       js=_asset("viewer.js"))


def embedded_json(data: dict[str, Any]) -> str:
    """`data` as JSON that is safe inside a <script> element: a sample's text may hold `</script>`, and `<` only
    occurs inside JSON strings, where its escape means the same."""
    return json.dumps(data, allow_nan=False, separators=(",", ":")).replace("<", "\\u003c")


@lru_cache(maxsize=None)
def _asset(name: str) -> str:
    return resources.files("megarl.view").joinpath(name).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()
