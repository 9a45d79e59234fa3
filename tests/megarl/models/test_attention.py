"""megarl.models.attention: packed attention takes the sequence lengths packing made on the host, never reading a
cumulative-length tensor's values in a layer."""

from pathlib import Path

from tests.helpers import worker_result

WORKER = Path(__file__).with_name("attention_worker.py")


def test_packed_attention_reads_no_cumulative_length_tensor():
    result = worker_result(WORKER)
    assert result["shape"] == [18, 4 * 16]
    assert result["max_abs_diff"] == 0.0, result
