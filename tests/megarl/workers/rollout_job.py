"""Driver for test_workers.py, the same program under both launchers: actor and rollout roles colocated in 2
processes (transformers engines), weights synced, prompts generated, the actor's log-probs of the responses
compared with the engine's. Rank 0 (or the Ray driver) writes the JSON."""

import argparse
import json
import sys

from megarl.process_exit import exit_process


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("out")
    parser.add_argument("--actor-tp", type=int, default=2)
    parser.add_argument("--rollout-tp", type=int, default=1)
    parser.add_argument("--without-ray", action="store_true")
    args = parser.parse_args()
    if args.without_ray:
        from tests.helpers import hide_ray

        hide_ray()

    import torch.distributed as dist

    from megarl.config import load_config
    from megarl.placement import MAIN_POOL, start_workers
    from megarl.rollout.batch import prompt_batch
    from megarl.rollout.gates import logprob_agreement
    from megarl.trainer.weight_sync import ColocatedSync
    from megarl.workers.actor import ActorWorker
    from megarl.workers.groups import ActorGroup, ColocatedRolloutGroup
    from megarl.workers.inputs import role_inputs
    from megarl.workers.rollout import ColocatedRolloutWorker

    cfg = load_config(overrides=[
        f"model.path={args.model_dir}", "rollout.name=transformers", "algorithm.adv_estimator=grpo", "rollout.n=2",
        "trainer.n_gpus_per_node=2", f"actor.megatron.tensor_model_parallel_size={args.actor_tp}",
        f"rollout.tensor_model_parallel_size={args.rollout_tp}", "data.max_prompt_length=16",
        "data.max_response_length=6", "data.train_batch_size=4", "actor.ppo_mini_batch_size=2",
        "actor.log_prob_micro_batch_size_per_gpu=3", "trainer.collective_timeout_s=120",
    ])
    with start_workers(cfg) as cluster:
        inputs = role_inputs(cfg, total_steps=1)
        actor = ActorGroup(cluster[MAIN_POOL].spawn("actor", ActorWorker, inputs.actor))
        rollout = ColocatedRolloutGroup(cluster[MAIN_POOL].spawn("rollout", ColocatedRolloutWorker, inputs.rollout,
                                                                 actor.handle))
        sync = ColocatedSync(rollout).sync()
        prompts = prompt_batch({"prompt_ids": [[5, 17, 33, 2, 9], [40, 41, 42], [7, 8], [99, 3, 4, 5]],
                                "data_source": ["a", "b", "c", "d"]})
        out = rollout.generate(prompts, seed=7)
        out = out.union(actor.compute_log_prob(out))
        greedy = rollout.generate(prompts, validate=True)
        rollout.release()
        result = {
            "launcher": cluster.launcher, "engines": rollout.handle.dp_size, "sync_metrics": sorted(sync),
            "uid": list(out["uid"]), "data_source": list(out["data_source"]),
            "responses": out["responses"].tolist(), "response_mask": out["response_mask"].tolist(),
            "finish_reason": list(out["finish_reason"]), **logprob_agreement(
                out["rollout_log_probs"], out["old_log_probs"], out["response_mask"]),
            "greedy": greedy["responses"].tolist(), "greedy_uid": list(greedy["uid"]),
            "ray_imported": sys.modules.get("ray") is not None,
        }
        if not dist.is_initialized() or dist.get_rank() == 0:
            with open(args.out, "w") as f:
                json.dump(result, f)


if __name__ == "__main__":
    exit_process(main())
