"""megarl.models.attention: packed attention takes the sequence lengths packing made on the host, never reading a
cumulative-length tensor's values in a layer."""

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import ENV, REPO_ROOT

WORKER = Path(__file__).with_name("attention_worker.py")


def test_packed_attention_reads_no_cumulative_length_tensor():
    done = subprocess.run([sys.executable, str(WORKER)], env=ENV, cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["shape"] == [18, 4 * 16]
    assert result["max_abs_diff"] == 0.0, result
