"""megarl.view.run_data: a run directory read into the page's data, with the defaults, the missing parts and the
errors that say what to pass instead."""

import json

import pytest

from megarl.view.run_data import RunDirError, read_run
from tests.megarl.view.test_browser import PANELS, TRAIN_STEPS, VAL_STEPS, train_sample, write_jsonl, write_run


def test_reads_metrics_panels_and_samples(tmp_path):
    data = read_run(write_run(tmp_path / "run"))
    assert data["experiment_name"] == "view-test"
    assert [row["step"] for row in data["metrics"]] == [0, *TRAIN_STEPS]
    assert data["metrics"][0] == {"step": 0, "val-core/synthetic/arithmetic/acc/mean": 0.3}
    assert data["metrics"][2]["actor/pg_clipfrac"] is None  # NaN: JSON has no such number
    assert tuple(panel["id"] for panel in data["panels"]) == PANELS
    reward = next(panel for panel in data["panels"] if panel["id"] == "reward")
    assert reward["metrics"] == ["critic/score/mean", "critic/rewards/mean", "val-core/synthetic/arithmetic/acc/mean"]
    assert data["header"]["last_step"] == 5 and data["header"]["metrics"]["critic/score/mean"] == 1.0
    assert [entry["step"] for entry in data["train"]["steps"]] == list(TRAIN_STEPS)
    assert [entry["step"] for entry in data["val"]["steps"]] == list(VAL_STEPS)
    json.dumps(data, allow_nan=False)


def test_strips_are_the_per_token_values_present(tmp_path):
    data = read_run(write_run(tmp_path / "run"))
    without_critic, with_critic = data["train"]["steps"][2]["samples"][:2]
    assert [strip["key"] for strip in without_critic["strips"]] == ["advantages", "returns", "log_ratio"]
    assert [strip["key"] for strip in with_critic["strips"]] == \
        ["values", "advantages", "returns", "log_ratio", "ref_kl", "entropy"]
    raw = train_sample(3, 1)
    log_ratio = next(strip["values"] for strip in with_critic["strips"] if strip["key"] == "log_ratio")
    expected = [old - rollout for old, rollout in zip(raw["old_log_probs"], raw["rollout_log_probs"])]
    assert log_ratio == pytest.approx(expected, rel=1e-3, abs=1e-7)
    assert len(with_critic["tokens"]) == len(log_ratio) == raw["response_length"]
    assert with_critic["answer"] == raw["answer"]


def test_without_config_or_samples_the_defaults_apply(tmp_path):
    run = write_run(tmp_path / "my-run", config=False, samples=False)
    data = read_run(run)
    assert data["experiment_name"] == "my-run"
    assert data["train"] == {"dir": str(run / "samples" / "train"), "found": False, "steps": []}
    assert data["val"]["found"] is False and data["val"]["dir"] == str(run / "samples" / "val")
    assert [panel["id"] for panel in data["panels"]] == list(PANELS)


def test_configured_sample_directories(tmp_path):
    run = write_run(tmp_path / "run")
    (run / "samples" / "train").rename(tmp_path / "rollouts")
    (run / "config.yaml").write_text(f"trainer:\n  experiment_name: e\n  rollout_data_dir: {tmp_path / 'rollouts'}\n"
                                     "  validation_data_dir: null\n")
    data = read_run(run)
    assert data["train"]["dir"] == str(tmp_path / "rollouts")
    assert [entry["step"] for entry in data["train"]["steps"]] == list(TRAIN_STEPS)
    assert [entry["step"] for entry in data["val"]["steps"]] == list(VAL_STEPS)


def test_a_missing_run_dir_or_metrics_file_says_what_to_pass(tmp_path):
    with pytest.raises(RunDirError, match="does not exist: pass a training run's output directory"):
        read_run(tmp_path / "nope")
    with pytest.raises(RunDirError, match="has no metrics.jsonl"):
        read_run(tmp_path)


def test_a_line_being_written_is_left_for_later_but_a_broken_line_is_an_error(tmp_path):
    run = write_run(tmp_path / "run", samples=False)
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "critic/score/me')
    assert read_run(run)["metrics"][-1]["step"] == 5
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join([lines[0], "{oops", *lines[1:]]) + "\n")
    with pytest.raises(RunDirError, match=r"metrics.jsonl:2 is not a JSON object"):
        read_run(run)


def test_answer_offsets_outside_the_output_are_found_again(tmp_path):
    run = write_run(tmp_path / "run", samples=False)
    write_jsonl(run / "samples" / "val" / "1.jsonl", [
        {"index": 0, "output": "x = 42, so 42", "answer": {"text": "42", "start": 30, "end": 32}, "score": 1.0},
        {"index": 1, "output": "so \\boxed{7.0}", "answer": {"text": "7", "start": 10, "end": 13}, "score": 1.0},
        {"index": 2, "output": "no idea", "answer": None, "score": 0.0},
        {"index": 3, "output": "no idea", "answer": {"text": "7", "start": 0, "end": 99}, "score": 0.0},
    ])
    answers = [sample["answer"] for sample in read_run(run)["val"]["steps"][0]["samples"]]
    assert answers == [{"text": "42", "start": 11, "end": 13}, {"text": "7", "start": 10, "end": 13}, None,
                       {"text": "7"}]
