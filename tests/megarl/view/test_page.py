"""megarl.view.page, the --out and --port commands: a self-contained page, a server that rereads the run on each
request, and errors that name what to fix (exit code 2)."""

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from megarl.cli import main
from megarl.view import build_page, read_run
from tests.megarl.view.test_browser import REPO_ROOT, write_run

REMOTE = re.compile(r"<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=\s*[\"']?(https?:)?//", re.IGNORECASE)


def embedded_data(page: str) -> dict:
    found = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', page, re.DOTALL)
    return json.loads(found.group(1))


def test_page_is_self_contained(tmp_path):
    data = read_run(write_run(tmp_path / "run"))
    page = build_page(data)
    assert not REMOTE.search(page)
    assert "plotly.js v" in page and "Plotly.react" in page  # the offline bundle and viewer.js
    assert page.count("<script") == page.count("</script>") == 4  # a sample's "</script>" stays inside its string
    assert embedded_data(page) == data
    assert "const DATA_URL = null;" in page


def test_out_writes_the_page(tmp_path, capsys):
    out = tmp_path / "pages" / "view.html"
    assert main(["view", str(write_run(tmp_path / "run")), "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<title>view-test · megarl view</title>" in page
    assert embedded_data(page)["header"]["last_step"] == 5


@pytest.mark.parametrize("make_run_dir, message", [
    (lambda tmp: tmp / "nope", "does not exist: pass a training run's output directory"),
    (lambda tmp: tmp, "has no metrics.jsonl"),
])
def test_a_bad_run_dir_exits_2_with_a_message(tmp_path, make_run_dir, message):
    result = subprocess.run([sys.executable, "-m", "megarl.cli", "view", str(make_run_dir(tmp_path)), "--out",
                             str(tmp_path / "page.html")], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "page.html").exists()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_server_rereads_the_run_on_each_request(tmp_path):
    run = write_run(tmp_path / "run")
    server = subprocess.Popen([sys.executable, "-m", "megarl.cli", "view", str(run), "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        first_line = server.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", first_line)
        assert url, first_line + server.stderr.read() if server.poll() is not None else first_line
        status, page = get(url.group(0))
        assert status == 200 and 'const DATA_URL = "data.json";' in page and not REMOTE.search(page)
        status, body = get(url.group(0) + "data.json")
        assert status == 200 and json.loads(body)["header"]["last_step"] == 5
        with open(run / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"step": 6, "critic/score/mean": 0.9}) + "\n")
        data = json.loads(get(url.group(0) + "data.json")[1])
        assert data["header"]["last_step"] == 6 and data["metrics"][-1] == {"step": 6, "critic/score/mean": 0.9}
        assert get(url.group(0) + "nope")[0] == 404
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_cli_lists_view(capsys):
    assert main([]) == 2
    assert re.search(r"^  view +a run's curves", capsys.readouterr().err, re.MULTILINE)
