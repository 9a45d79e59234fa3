import json
import os
import subprocess
import sys

import pytest

from megarl.cli import main


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_preprocess_command(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    write_jsonl(raw / "train.jsonl", [{"question": "1+1?", "answer": "1+1=2\n#### 2"}])
    write_jsonl(raw / "test.jsonl", [{"question": "2+2?", "answer": "#### 4"}])
    assert main(["preprocess", "gsm8k", "--input", str(raw), "--output-dir", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "train.parquet").is_file() and (tmp_path / "out" / "test.parquet").is_file()
    assert "train:" in capsys.readouterr().out


def test_preprocess_errors_are_messages_not_tracebacks(tmp_path, capsys):
    assert main(["preprocess", "gsm8k", "--input", str(tmp_path / "nope.jsonl"), "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "nope.jsonl does not exist" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as info:
        main(["preprocess", "gsm8k", "--input", "x", "--output-dir", str(tmp_path), "--data-source", "d"])
    assert info.value.code == 2
    assert "apply to math and custom, not gsm8k" in capsys.readouterr().err


def test_usage_without_a_command(capsys):
    assert main([]) == 2
    assert "commands:" in capsys.readouterr().err
    assert main(["--help"]) == 0


def run(*args, env=None):
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )


def test_console_entry_points_and_offline_hub_name(tmp_path):
    result = run("-m", "megarl.cli", "preprocess", "gsm8k", "--input", "openai/gsm8k", "--output-dir", str(tmp_path),
                 env={"HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2
    assert "loading it as a HF dataset failed" in result.stderr and "Pass the path" in result.stderr
    keys = run("-m", "megarl.train", "--help-keys")
    assert keys.returncode == 0 and "rollout.n = 1" in keys.stdout
