"""The judge's engine in the memory plan (megarl/plan/judge.py): beside the actor its weights and released engine are
in every phase and out of what the rollout engine finds free, and its pass adds its KV cache to generation's memory;
judging as responses finish (rollout.mode=async), generation's phase holds it; on GPUs of its own it is a pool of its
own and leaves the actor's GPUs as they were."""

import json

import pytest

from megarl.models.shapes import hf_config
from megarl.plan import plan_memory
from megarl.plan.calibration import gib

FRACTION = 0.5  # the 8B recipe's rollout.gpu_memory_utilization


@pytest.fixture
def judge_dir(tmp_path):
    config = hf_config("qwen2.5-0.5b", eos_token_id=0, pad_token_id=0, bos_token_id=None).to_dict()
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_a_judge_beside_the_actor_holds_its_weights_everywhere_and_its_kv_cache_in_its_pass(inputs_for, judge_dir):
    plain = plan_memory(inputs_for(gpu_gib=80.0))
    inputs = inputs_for(f"reward.judge.model.path={judge_dir}", "reward.judge.gpu_memory_utilization=0.2",
                        gpu_gib=80.0)
    judged = plan_memory(inputs)
    weights = 2 * inputs.judge.parameters
    released = inputs.calibration.released_engine(1)
    assert [p.name for p in judged.phases] == ["gen", "judge"] + [p.name for p in plain.phases[1:]]
    for phase in plain.phases:
        after = judged.phase(phase.name)
        assert after.part("judge weights") == weights and after.part("released judge engine") == released
        if phase.name in ("gen", "sync"):  # the rollout engine's share is of what the judge left free
            assert after.total - phase.total == pytest.approx((1 - FRACTION) * (weights + released), abs=2)
        else:
            assert after.total - phase.total == weights + released, phase.name
    # The judge's share is of what the trainer left free when it started, before the rollout engine.
    free = judged.phase("judge").part("judge KV cache") + weights
    gen = judged.phase("gen")
    trainer_free = (inputs.gpu_bytes - gen.part("trainer process") - gib(inputs.calibration.cuda_context_gib)
                    - sum(size for name, size in gen.parts if name.startswith(("actor", "reference"))))
    assert free == pytest.approx(0.2 * trainer_free, abs=1)
    pass_ = judged.phase("judge")
    assert pass_.total - gen.total == (pass_.part("judge KV cache") + gib(inputs.calibration.engine_runtime_gib))
    assert judged.hosts[0].part("judge engine processes") == 4 * gib(inputs.calibration.host_engine_gib)


def test_a_judge_that_streams_holds_its_kv_cache_through_generation(inputs_for, judge_dir):
    judge = (f"reward.judge.model.path={judge_dir}", "reward.judge.gpu_memory_utilization=0.2")
    after = plan_memory(inputs_for(*judge, gpu_gib=80.0))
    streaming = plan_memory(inputs_for(*judge, "rollout.mode=async", gpu_gib=80.0))
    assert "judge" not in [p.name for p in streaming.phases]
    assert streaming.phase("gen").parts == after.phase("judge").parts
    assert [p.total for p in streaming.phases if p.name != "gen"] == \
        [p.total for p in after.phases if p.name not in ("gen", "judge")]


def test_a_judge_on_gpus_of_its_own_leaves_the_actors_gpus_alone(inputs_for, judge_dir):
    plain = plan_memory(inputs_for())
    inputs = inputs_for(f"reward.judge.model.path={judge_dir}", "reward.judge.enable_resource_pool=true",
                        "reward.judge.gpu_memory_utilization=0.9")
    judged = plan_memory(inputs)
    assert [(p.name, p.pool, p.total) for p in judged.phases[:-1]] == [(p.name, p.pool, p.total) for p in plain.phases]
    own = judged.phase("judge", pool="judge")
    assert own.part("judge weights") == 2 * inputs.judge.parameters and own.fits
    assert own.part("judge KV cache") + own.part("judge weights") == pytest.approx(
        0.9 * (inputs.gpu_bytes - own.part("judge worker process") - gib(inputs.calibration.cuda_context_gib)), abs=1)
    assert [h.pool for h in judged.hosts] == ["trainer", "judge"]


def test_a_judge_share_too_small_for_a_sequence_is_a_problem_named_by_its_key(inputs_for, judge_dir):
    small = plan_memory(inputs_for(f"reward.judge.model.path={judge_dir}", "reward.judge.gpu_memory_utilization=0.01",
                                   "rollout.gpu_memory_utilization=0.5", gpu_gib=80.0))
    problem = small.phase("judge").problem
    assert problem is not None and problem.startswith("the judge's share, reward.judge.gpu_memory_utilization=0.01")
    assert not small.fits
