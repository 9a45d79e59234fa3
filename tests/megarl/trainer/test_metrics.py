import json

import pytest

from megarl.config import load_config
from megarl.trainer.metrics import MetricsLogger


def config(tmp_path, loggers):
    return load_config(overrides=[f"trainer.output_dir={tmp_path}", f"trainer.logger=[{','.join(loggers)}]"])


def steps_in(path):
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_each_step_is_one_json_line_and_a_resumed_run_drops_the_steps_after_its_checkpoint(tmp_path):
    with MetricsLogger(config(tmp_path, ["console"]), 4, is_writer=True) as logger:
        for step in range(4):
            logger.log(step, {"critic/score/mean": step / 4})
    assert steps_in(tmp_path / "metrics.jsonl") == [0, 1, 2, 3]
    with MetricsLogger(config(tmp_path, ["console"]), 4, is_writer=True, start_step=2) as logger:
        logger.log(3, {"critic/score/mean": 0.5})
    assert steps_in(tmp_path / "metrics.jsonl") == [0, 1, 2, 3]
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])["critic/score/mean"] == 0.5


def test_only_the_writer_writes(tmp_path):
    with MetricsLogger(config(tmp_path, ["console"]), 1, is_writer=False) as logger:
        logger.log(1, {"critic/score/mean": 1.0})
    assert not (tmp_path / "metrics.jsonl").exists()


def test_a_failing_run_still_closes_its_loggers(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with pytest.raises(RuntimeError, match="step failed"):
        with MetricsLogger(config(tmp_path, ["console", "tensorboard"]), 3, is_writer=True) as logger:
            logger.log(1, {"actor/pg_loss": 0.25})
            raise RuntimeError("step failed")
    assert logger.progress.disable  # tqdm's bar is closed
    assert logger.tensorboard.all_writers is None  # closed: the event file is complete
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("actor/pg_loss")] == [(1, 0.25)]


def test_the_console_shows_a_line_every_log_interval_steps_at_validations_and_at_the_end(tmp_path, capsys):
    with MetricsLogger(config(tmp_path, ["console"]), 100, is_writer=True) as logger:  # no interval: ~20 lines
        for step in range(101):
            logger.log(step, {"critic/score/mean": 0.5, **({"val-core/x/reward/mean@1": 1.0} if step == 33 else {})})
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "step 5/100 score=0.5"
    shown = [int(line.split()[1].split("/")[0]) for line in lines]
    assert shown == [0, 5, 10, 15, 20, 25, 30, 33, *range(35, 101, 5)]
    cfg = load_config(overrides=[f"trainer.output_dir={tmp_path}", "trainer.log_interval=40"])
    with MetricsLogger(cfg, 100, is_writer=True) as logger:
        for step in range(1, 101):
            logger.log(step, {"critic/score/mean": 0.5})
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines()] == ["40/100", "80/100", "100/100"]
