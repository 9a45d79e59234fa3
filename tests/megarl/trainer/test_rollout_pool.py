"""Rollout engines on a pool of their own (`rollout.enable_resource_pool`, Ray and torchrun on CPU): the actor's
weights reach them over the bridge (parallel/weight_bridge.py; tests/parallel/test_weight_bridge.py cuts them for
tensor-parallel engines), and each engine forgets what it cached from the old weights. In turn (`trainer.staleness=0`) the run trains exactly as with
the engines beside the actor; a step ahead (`trainer.staleness=1`) step t trains on responses of the weights before
step t − 1, and a resumed run sends the prompts that were in flight again."""

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from megarl.trainer.phases import timed
from megarl.trainer.weight_sync import BridgeSync
from parallel.topology import free_port
from tests.helpers import ENV, overrides, read_metrics, run_command

POOL = ["rollout.enable_resource_pool=true", "rollout.n_gpus_per_node=1", "trainer.n_gpus_per_node=1"]
# The engines' log-probs are an older policy's a step ahead: the engine/trainer gate does not apply.
AHEAD = [*POOL, "trainer.staleness=1", "rollout.max_logprob_mult_error=null"]
# The weight-sync metrics say how the weights travelled, and timings vary: everything else must be equal.
DIFFERS = ("timing_s/", "perf/", "memory/", "update_weights/")
# The tiny random model never answers right: a score that varies with the response gives GRPO advantages, so the
# weights move every step and the engines must get them.
LENGTH_REWARD = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" \
                "    return len(solution_str) / 10\n"


# The transformers engine caches nothing; this one stands in for SGLang's prefix cache: generating after a weight load
# that was not followed by a cache flush is an error (SGLang would silently reuse KV computed with the old weights).
CACHING_ENGINE = """
from megarl.rollout.transformers_engine import TransformersEngine


class PrefixCachingEngine(TransformersEngine):
    stale_cache = False

    def load_weights(self, parts):
        super().load_weights(parts)
        self.stale_cache = True

    def flush_cache(self):
        self.stale_cache = False

    def generate(self, prompts, params, on_response=None):
        if self.stale_cache:
            raise RuntimeError("generating with a prefix cache from the old weights: the sync did not flush it")
        return super().generate(prompts, params, on_response)
"""


def caching_engine(tmp_path) -> str:
    engine = tmp_path / "caching_engine.py"
    engine.write_text(CACHING_ENGINE)
    return f"rollout.name={engine}:PrefixCachingEngine"


def torchrun(processes: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(processes), "--master-port",
            str(free_port())]


def train(setup, out, *extra, launcher=(sys.executable,), env: dict | None = None):
    """The tiny GRPO run; under Ray unless `launcher` starts it (torchrun(N))."""
    reward = out.parent / "length_reward.py"
    reward.write_text(LENGTH_REWARD)
    proc = run_command([*launcher, "-m", "megarl.train",
                        *overrides(setup, out, "algorithm.adv_estimator=grpo", "rollout.n=4", "actor.optim.lr=3e-3",
                                   "trainer.total_training_steps=3", "trainer.n_gpus_per_node=1",
                                   f"reward.function={reward}:compute_score", "reward.workers=1", *extra)],
                       timeout=480, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    return read_metrics(out)


def comparable(steps):
    return [{k: v for k, v in step.items() if not k.startswith(DIFFERS)} for step in steps]


def test_engines_on_their_own_gpus_train_as_colocated_ones_in_turn(setup, tmp_path):
    colocated = train(setup, tmp_path / "colocated")
    pooled = train(setup, tmp_path / "pooled", *POOL, caching_engine(tmp_path))
    assert comparable(pooled) == comparable(colocated)
    assert [s["actor/grad_norm"] > 0 for s in pooled] == [True] * 3  # the weights move: the sync carries them
    assert all(s["update_weights/bytes_sent_gb"] > 0 and "update_weights/receive_s" in s for s in pooled)
    assert all("timing_s/sync_wait" in s for s in pooled) and not any("timing_s/sync_wait" in s for s in colocated)


class Call:
    def __init__(self, pool: ThreadPoolExecutor, method):
        self.pool, self.method = pool, method

    def submit(self):
        return self.pool.submit(self.method)

    def __call__(self):
        return self.submit().result()


class Ranks:
    """Worker groups in miniature: one thread runs a role's calls in the order they come, as a worker rank does;
    `NAME_async` is the call in flight."""

    def __init__(self, **methods):
        pool = ThreadPoolExecutor(1)
        for name, method in methods.items():
            call = Call(pool, method)
            setattr(self, name, call)
            setattr(self, f"{name}_async", call.submit)


def test_the_sync_after_a_generation_in_flight_times_its_wait_apart():
    rollout = Ranks(generate=lambda: time.sleep(0.5), idle=lambda: None,
                    receive_weights=lambda: {"update_weights/receive_s": 0.01})
    sender = Ranks(send_weights=lambda: {"update_weights/stream_s": 0.01})
    weights = BridgeSync(rollout, sender)
    rollout.generate_async()  # the next step's generation, ahead
    metrics = {}
    metrics.update(weights.sync(partial(timed, metrics)))
    assert metrics["timing_s/sync_wait"] >= 0.4 and metrics["timing_s/update_weights"] < 0.2
    assert metrics["update_weights/receive_s"] == 0.01


def test_under_torchrun_the_engines_pool_serves_the_trainers_processes(setup, tmp_path):
    """torchrun starts the trainer's process and the engine's; the engine's serves the trainer's calls
    (parallel/served_backend.py): in turn exactly as colocated, and a step ahead with the lag."""
    # torchrun gives each of several processes one CPU thread: the one-process run gets one too, so that both runs'
    # reductions (the engine's and the trainer's log-probs) add up in the same order.
    one_thread = {**ENV, "OMP_NUM_THREADS": "1"}
    colocated = train(setup, tmp_path / "colocated", launcher=torchrun(1), env=one_thread)
    pooled = train(setup, tmp_path / "pooled", *POOL, launcher=torchrun(2), env=one_thread)
    assert comparable(pooled) == comparable(colocated)
    ahead = train(setup, tmp_path / "ahead", *AHEAD, launcher=torchrun(2))
    assert [s["rollout_corr/staleness"] for s in ahead] == [0.0, 1.0, 1.0]
    assert ahead[0]["rollout/logprob_mult_error"] <= 1.001 < ahead[1]["rollout/logprob_mult_error"]
    assert all(s["update_weights/bytes_sent_gb"] > 0 and "timing_s/sync_wait" in s for s in ahead)


def prompts_of(out, step):
    return sorted(json.loads(line)["input"] for line in (out / f"samples/train/{step}.jsonl").read_text().splitlines())


def test_a_step_ahead_trains_on_the_weights_before_the_last_step_and_resumes(setup, tmp_path):
    out = tmp_path / "ahead"
    ahead = train(setup, out, *AHEAD, "trainer.save_freq=2", "trainer.log_samples=-1")
    assert [s["rollout_corr/staleness"] for s in ahead] == [0.0, 1.0, 1.0]
    # Step 2's responses came from the weights before step 1: the trainer's old log-probs (after step 1) differ.
    assert ahead[0]["rollout/logprob_mult_error"] <= 1.001 < ahead[1]["rollout/logprob_mult_error"]
    # Step 2's checkpoint holds the loader before step 3's prompts, which were in flight: 2 batches drawn (of 2 an
    # epoch), not 3; resumed from it, step 3 sends the same prompts again.
    step_2 = out / "checkpoints/global_step_2"
    loader = json.loads((step_2 / "trainer_state.json").read_text())["loader"]
    assert (loader["epoch"], loader["batch_in_epoch"]) == (1, 0)
    first_prompts = prompts_of(out, 3)
    resumed = train(setup, out, *AHEAD, "trainer.log_samples=-1",
                    "trainer.resume_mode=resume_path", f"trainer.resume_from_path={step_2}")
    assert [s["step"] for s in resumed][-1] == 3 and prompts_of(out, 3) == first_prompts
