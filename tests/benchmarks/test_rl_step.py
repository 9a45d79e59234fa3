"""benchmarks/rl_step.py's summary of a run's metrics: medians after the warm-up step, each phase's FLOP floor (the
critic's with its value head, not the vocabulary projection) and MFU, and the row's `mfu` by phase (and against a
measured matmul peak); and its baselines (on CPU the HF-transformers loop alone) on the recipe's own prompts."""

import sys
from types import SimpleNamespace

import pytest

from tests.helpers import REPO_ROOT, write_tiny_rl_setup

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from rl_step import baselines, prompt_ids, shape_name, summary  # noqa: E402

from megarl.config import load_config  # noqa: E402
from megarl.models.shapes import hf_config  # noqa: E402
from megarl.trainer.perf import training_flops  # noqa: E402

PEAK = 1e15


def step_metrics(step: int, seconds: float) -> dict:
    phases = ("gen", "old_log_prob", "ref", "values", "update_critic", "update_actor", "update_weights")
    return {"step": step, "timing_s/step": 10 * seconds, "perf/throughput": 1000 / seconds,
            "perf/total_num_tokens": 64 * 600, "response_length/mean": 500,
            **{f"timing_s/{name}": seconds for name in phases}}


def test_medians_skip_the_warm_up_step_and_the_critics_floor_has_its_value_head():
    cfg = load_config(REPO_ROOT / "recipes/qwen2_5_0_5b_ppo_gsm8k.yaml", [])
    model = hf_config("qwen2.5-0.5b")
    row = summary(cfg, model, [step_metrics(1, 9.0), step_metrics(2, 1.0), step_metrics(3, 2.0),
                               step_metrics(4, 3.0)], PEAK)
    assert row["steps_measured"] == 3 and row["step_s_median"] == 20.0
    lengths = [600] * 64
    actor, critic = training_flops(model, lengths), training_flops(model, lengths, value_head=True)
    assert critic < 0.8 * actor  # Qwen2.5-0.5B's vocabulary projection is over a quarter of its matmul weights
    expected = {"old_log_prob": actor / 3, "ref": actor / 3, "values": critic / 3, "update_actor": actor,
                "update_critic": critic}
    for name, flops in expected.items():
        assert row["phases"][name]["floor_s"] == pytest.approx(flops / PEAK)
        assert row["mfu"][name] == pytest.approx(flops / PEAK / 2.0)
    assert "gen" not in row["mfu"] and row["phases"]["gen"]["s"] == 2.0


def test_the_row_keeps_every_measured_steps_phases_beside_their_medians():
    cfg = load_config(REPO_ROOT / "recipes/qwen2_5_0_5b_ppo_gsm8k.yaml", [])
    steps = [step_metrics(1, 9.0), step_metrics(2, 1.0), step_metrics(3, 2.0), step_metrics(4, 4.0)]
    per_step = summary(cfg, hf_config("qwen2.5-0.5b"), steps, PEAK)["per_step"]
    assert per_step["step"] == [2, 3, 4]
    timing = per_step["timing_s"]
    assert timing["gen"] == timing["update_weights"] == [1.0, 2.0, 4.0] and timing["step"] == [10.0, 20.0, 40.0]
    assert per_step["gen_tokens_per_s"] == [500 * 64 / s for s in (1.0, 2.0, 4.0)]  # 64 responses of 500 tokens


def test_the_row_keeps_each_phases_largest_device_peak_and_names_a_layer_proxy():
    cfg = load_config(REPO_ROOT / "recipes/qwen2_5_0_5b_ppo_gsm8k.yaml", [])
    steps = [{**step_metrics(step, 1.0), "memory/gen/peak_gb": peak, "memory/update_actor/peak_gb": 2 * peak,
              "memory/host/peak_gb": 100.0} for step, peak in ((1, 50.0), (2, 30.0), (3, 40.0))]
    assert summary(cfg, hf_config("qwen2.5-0.5b"), steps, None)["device_peak_gb"] == {"gen": 40.0, "update_actor": 80.0}
    assert shape_name(SimpleNamespace(shape="qwen3-30b-a3b", layers=12)) == "qwen3-30b-a3b (12 of its 48 layers)"
    assert shape_name(SimpleNamespace(shape="qwen3-8b", layers=None)) == "qwen3-8b"


def test_an_even_count_of_steps_takes_the_mean_of_the_middle_two():
    cfg = load_config(REPO_ROOT / "recipes/qwen2_5_0_5b_ppo_gsm8k.yaml", [])
    row = summary(cfg, hf_config("qwen2.5-0.5b"), [step_metrics(1, 9.0), step_metrics(2, 1.0),
                                                    step_metrics(3, 4.0)], None)
    assert row["step_s_median"] == 25.0 and row["phases"]["gen"]["s"] == 2.5


def test_the_hf_loop_runs_on_the_recipes_prompts_and_the_row_gets_its_ratio(tmp_path):
    setup = write_tiny_rl_setup(tmp_path)
    model, train = setup / "model", setup / "train.parquet"
    cfg = load_config(overrides=[f"model.path={model}", f"data.train_files=[{train}]", "data.val_files=[]",
                                 "data.train_batch_size=2", "actor.ppo_mini_batch_size=2", "rollout.n=2",
                                 "data.max_prompt_length=64", "data.max_response_length=4"])
    row = {"tokens_per_s_per_gpu": 1000.0}
    baselines(cfg, model, train, row)
    hf = row["baseline"]["hf_transformers"]
    assert list(row["baseline"]) == ["hf_transformers"]  # standalone SGLang needs a GPU
    assert hf["tokens"] == 2 * sum(len(p) for p in prompt_ids(cfg, model, train, 2)) + 2 * 2 * 4
    assert row["vs_hf_transformers"] == 1000.0 / hf["tokens_per_s_per_gpu"]

    without_loop = {"tokens_per_s_per_gpu": 1000.0}
    baselines(cfg, model, train, without_loop, hf_loop=False)  # --no-hf-loop
    assert without_loop == {"tokens_per_s_per_gpu": 1000.0, "baseline": {}}


def test_the_measured_matmul_peak_gives_each_phase_a_second_mfu():
    from rl_step import with_matmul_peak

    row = {"phases": {"update_actor": {"s": 2.0, "floor_s": 0.5, "mfu": 0.25}, "gen": {"s": 1.0}}}
    with_matmul_peak(row, datasheet=1000e12, measured=800e12)
    assert (row["peak_tflops"], row["matmul_peak_tflops"]) == (1000.0, 800.0)
    assert row["mfu_vs_matmul_peak"] == {"update_actor": pytest.approx(0.25 * 1000 / 800)}
