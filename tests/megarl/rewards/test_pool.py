"""A user's reward function runs in worker processes: a sample that hangs scores 0 after `reward.timeout_s`, its
worker is replaced, and the run goes on; the crash semantics are the in-process ones. What a call prints reaches the
console up to a cap, the rest goes to the reward log, counted."""

import json
import os
import sys
import time

import pytest

from megarl.config.schema import RewardConfig
from megarl.registry import UnknownNameError
from megarl.rewards import RewardFunctionError, RewardScorer
from megarl.rewards.pool import OUTPUT_CAP, RewardPool
from tests.helpers import run_command
from tests.megarl.rewards.test_dispatch import encode_responses

TIMEOUT_S = 1.0
USER_REWARD = """
import os, time
from megarl.rewards.registry import default_compute_score

def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
    if data_source != "d":
        return default_compute_score(data_source, solution_str, ground_truth)
    if "hang" in solution_str:
        time.sleep(1000)
    if "boom" in solution_str:
        raise ZeroDivisionError("user bug")
    if "die" in solution_str:
        os._exit(3)
    if "lambda" in solution_str:
        return {"score": 1.0, "pid": lambda: 0}
    if "loud" in solution_str:
        print("x" * 5000)
    return {"score": 1.0 + bonus, "pid": os.getpid()}
"""


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    path = tmp_path_factory.mktemp("reward") / "user_reward.py"
    path.write_text(USER_REWARD)
    return f"{path}:compute_score"


@pytest.fixture(scope="module")
def scorer(tokenizer, spec):
    """One pool for the module: starting its workers is most of each test's time."""
    with RewardScorer.from_config(tokenizer, RewardConfig(spec, {"bonus": 0.5}, TIMEOUT_S, workers=2)) as scorer:
        yield scorer


def score(tokenizer, scorer, texts, data_sources=None, truths=None):
    responses, mask = encode_responses(tokenizer, texts)
    return scorer(responses, mask, data_sources or ["d"] * len(texts), truths or ["g"] * len(texts))


@pytest.mark.timeout(60)
def test_hung_samples_score_zero_after_the_timeout_and_the_next_batch_scores(tokenizer, scorer, caplog):
    score(tokenizer, scorer, ["warm"])  # the workers start outside the timed batch
    start = time.monotonic()
    result = score(tokenizer, scorer, ["fine", "hang 1", "fine", "hang 2", "fine"])
    # Two workers: each hung sample holds one for TIMEOUT_S, then a fresh worker takes over.
    assert time.monotonic() - start < 4 * TIMEOUT_S + 10
    assert result.scores.tolist() == [1.5, 0.0, 1.5, 0.0, 1.5]
    assert result.metrics == {"reward/num_errors": 0.0, "reward/num_timeouts": 2.0, "reward/output_overflow_bytes": 0.0}
    assert "reward.timeout_s=1.0" in caplog.text and "'hang 1'" in caplog.text and "'d'" in caplog.text
    after = score(tokenizer, scorer, ["fine", "fine", "fine"])
    assert after.scores.tolist() == [1.5] * 3 and after.num_timeouts == 0
    assert len(set(after.extra_info["pid"])) <= 2


@pytest.mark.timeout(60)
def test_exceptions_and_dead_workers_count_as_errors(tokenizer, scorer, caplog):
    result = score(tokenizer, scorer, ["boom", "fine", "die", "fine", "lambda"])
    assert result.scores.tolist() == [0.0, 1.5, 0.0, 1.5, 0.0]
    assert result.num_errors == 3 and result.num_timeouts == 0
    assert "ZeroDivisionError: user bug" in caplog.text and "exit code 3" in caplog.text
    assert "cannot be sent to the driver" in caplog.text
    assert score(tokenizer, scorer, ["fine"]).scores.tolist() == [1.5]


@pytest.mark.timeout(60)
def test_a_batch_that_only_times_out_stops_the_run_naming_the_timeout(tokenizer, scorer):
    with pytest.raises(RewardFunctionError, match=r"2 ran past reward.timeout_s=1.0s"):
        score(tokenizer, scorer, ["hang", "hang"])
    with pytest.raises(RewardFunctionError, match=r"failed on all 2 samples.*ZeroDivisionError: user bug"):
        score(tokenizer, scorer, ["boom", "boom"])
    assert score(tokenizer, scorer, ["fine"]).scores.tolist() == [1.5]


@pytest.mark.timeout(60)
def test_rule_scores_and_unknown_data_sources_cross_the_pool(tokenizer, scorer):
    result = score(tokenizer, scorer, ["#### 72", "#### 5"], ["openai/gsm8k"] * 2, ["72", "6"])
    assert result.scores.tolist() == [1.0, 0.0]
    with pytest.raises(UnknownNameError, match="unknown data_source 'gsm'"):
        score(tokenizer, scorer, ["#### 1", "hang"], ["gsm", "d"], ["1", "1"])
    assert score(tokenizer, scorer, ["fine"]).scores.tolist() == [1.5]


@pytest.mark.timeout(60)
def test_a_function_the_workers_cannot_load_stops_the_run(tmp_path):
    (tmp_path / "broken.py").write_text("raise ImportError('no GPU here')\n"
                                        "def f(**kw):\n    return 1.0\n")
    pool = RewardPool(f"{tmp_path}/broken.py:f", {}, timeout_s=TIMEOUT_S, workers=1)
    with pool, pytest.raises(RewardFunctionError, match=r"cannot load reward.function=.*no GPU here"):
        pool.map([{"data_source": "d", "solution_str": "x", "ground_truth": "g", "extra_info": None}])


def test_rule_rewards_score_in_the_driver(tokenizer):
    scorer = RewardScorer.from_config(tokenizer, RewardConfig())
    assert scorer.pool is None
    assert score(tokenizer, scorer, ["#### 72"], ["openai/gsm8k"], ["72"]).metrics == {"reward/num_errors": 0.0}


@pytest.mark.timeout(60)
def test_close_ends_every_worker(spec):
    pool = RewardPool(spec, {}, timeout_s=TIMEOUT_S, workers=1)
    with pool:
        pid = pool.map([{"data_source": "d", "solution_str": "x", "ground_truth": "g", "extra_info": None}])[0]
        assert pid.score == 1.0
        pid = pid.extra["pid"]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.timeout(60)
def test_what_calls_print_past_the_cap_is_counted(tokenizer, scorer):
    result = score(tokenizer, scorer, ["loud", "fine", "loud"])
    assert result.scores.tolist() == [1.5] * 3
    assert result.metrics["reward/output_overflow_bytes"] == 2 * (5001 - OUTPUT_CAP)  # the text and its newline


LOUD_POOL = """
import json, sys
from megarl.rewards.pool import RewardPool
sample = {"data_source": "d", "solution_str": "x", "ground_truth": "g", "extra_info": None}
with RewardPool(sys.argv[1], {}, timeout_s=60, workers=2, output_log=sys.argv[2]) as pool:
    outcomes = pool.map([sample] * 4)
print(json.dumps([[o.score, o.output_overflow] for o in outcomes]))
"""


@pytest.mark.timeout(120)
def test_a_function_printing_10_mb_a_call_puts_a_kilobyte_a_call_on_the_console(tmp_path):
    """The console is the workers' own (inherited) stdout and stderr: a process of its own, whose output is read."""
    (tmp_path / "loud.py").write_text("import sys\ndef f(**kw):\n    print('x' * 10_000_000)\n"
                                      "    sys.stderr.write('y' * 10)\n    return 1.0\n")
    log = tmp_path / "out" / "reward_function.log"
    log.parent.mkdir()
    done = run_command([sys.executable, "-c", LOUD_POOL, f"{tmp_path}/loud.py:f", str(log)], timeout=110)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = 10_000_011  # the x's, print's newline, the y's
    assert json.loads(done.stdout.splitlines()[-1]) == [[1.0, printed - OUTPUT_CAP]] * 4
    console = done.stdout + done.stderr
    assert len(console) < 4 * (OUTPUT_CAP + 200) + 200, console[:3000]
    assert console.count(f"[... {printed - OUTPUT_CAP} more bytes of this reward function call's output in {log}]") == 4
    assert log.stat().st_size > 4 * printed and log.read_text().count("=== reward worker pid") == 4
