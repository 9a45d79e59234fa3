"""Driver for test_update.py under torchrun (--nproc-per-node 1 or 2): actor, reference and critic roles of the
given mesh, colocated. The actor computes old log-probs, runs the PPO update (clipped loss, entropy bonus, KL
loss) on a fixed batch and computes the log-probs again; the reference scores the batch; the critic computes
values, runs its update and computes values again. Rank 0 writes the metrics and tensors. Several jobs
(`MODEL_DIR OUT [options] --and MODEL_DIR OUT [options] ...`) run one after another in one launch, each on workers
of its own, sparing each further job the processes' start-up."""

import argparse
import json
import math
import sys

import torch
import torch.distributed as dist

from megarl.process_exit import exit_process
from tests.helpers import run_jobs_in_turn


def main():
    parser = job_parser()
    run_jobs_in_turn(lambda argv: run_job(parser.parse_args(argv)), sys.argv[1:])


def job_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("out")
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--cp", type=int, default=1)
    parser.add_argument("--mini", type=int, default=4, help="actor.ppo_mini_batch_size (prompts)")
    parser.add_argument("--agg", default="token-mean")
    parser.add_argument("--dynamic", action="store_true")
    parser.add_argument("--correction", choices=["half", "reject"],
                        help="rollout correction with engine log-probs that make every IS weight 0.5 (half), or every "
                             "token's ratio e^5, outside token rejection's bounds (reject)")
    parser.add_argument("--tool-tokens", choices=["huge", "zero"],
                        help="responses with tool tokens (loss mask 0) between the model's turns, whose advantages and "
                             "reference log-probs are huge, or zero")
    return parser


def run_job(args: argparse.Namespace) -> None:
    from megarl.config import load_config
    from megarl.placement import MAIN_POOL, start_workers
    from megarl.rollout.base import Response
    from megarl.rollout.batch import prompt_batch, with_responses
    from megarl.workers.actor import ActorWorker
    from megarl.workers.critic import CriticWorker
    from megarl.workers.groups import ActorGroup, CriticGroup, ReferenceGroup
    from megarl.workers.inputs import actor_inputs, critic_inputs, reference_inputs
    from megarl.workers.reference import ReferenceWorker
    from parallel.batch import Batch

    cfg = load_config(overrides=[
        f"model.path={args.model_dir}", "algorithm.adv_estimator=grpo", "rollout.n=2", "rollout.temperature=0.8",
        f"trainer.n_gpus_per_node={args.gpus}", f"actor.megatron.tensor_model_parallel_size={args.tp}",
        f"actor.megatron.context_parallel_size={args.cp}", f"critic.megatron.tensor_model_parallel_size={args.tp}",
        f"critic.megatron.context_parallel_size={args.cp}", "critic.optim.lr=1e-2", "data.train_batch_size=4", "data.max_response_length=8", "data.max_prompt_length=16",
        f"actor.ppo_mini_batch_size={args.mini}", "actor.ppo_micro_batch_size_per_gpu=2",
        f"actor.use_dynamic_bsz={str(args.dynamic).lower()}", "actor.ppo_max_token_len_per_gpu=24",
        f"actor.loss_agg_mode={args.agg}", "actor.entropy_coeff=0.01", "actor.use_kl_loss=true",
        "actor.optim.lr=1e-2", "trainer.collective_timeout_s=120",
    ])
    prompts = prompt_batch({"prompt_ids": [[5, 17, 33, 2, 9], [40, 41, 42], [7, 8, 9, 10, 11, 12], [99, 3]]})
    lengths = [[8, 3], [5, 8], [1, 6], [7, 4]]
    responses = [[Response([(p * 7 + k * 3 + j) % 120 + 1 for j in range(n)], [0.0] * n, "length",
                           loss_mask=tool_mask(n) if args.tool_tokens else None)
                  for k, n in enumerate(ns)] for p, ns in enumerate(lengths)]
    batch = with_responses(prompts, responses)
    generator = torch.Generator().manual_seed(0)
    advantages = torch.randn(batch["responses"].shape, generator=generator) * batch["response_mask"]
    tool = (batch["responses"] > 0).float() - batch["response_mask"]  # the tool tokens' positions
    off_loss = {"huge": 1e6, "zero": 0.0}.get(args.tool_tokens, 0.0)
    advantages = advantages + off_loss * tool
    with start_workers(cfg) as cluster:
        actor = ActorGroup(cluster[MAIN_POOL].spawn("actor", ActorWorker, actor_inputs(cfg, total_steps=1)))
        reference = ReferenceGroup(cluster[MAIN_POOL].spawn("reference", ReferenceWorker, reference_inputs(cfg),
                                                            actor.handle))
        critic = CriticGroup(cluster[MAIN_POOL].spawn("critic", CriticWorker, critic_inputs(cfg, total_steps=1),
                                                      actor.handle))
        batch = batch.union(actor.compute_log_prob(batch))
        ref_log_prob = reference.compute_ref_log_prob(batch)["ref_log_prob"]
        batch = batch.union(Batch({"advantages": advantages,
                                   "ref_log_prob": batch["old_log_probs"] - 0.05 * batch["response_mask"]
                                   - off_loss * tool}))
        if args.correction:
            batch = batch.union(corrected(batch, args.correction))
        metrics = actor.update_actor(batch)
        after = actor.compute_log_prob(batch)["old_log_probs"]
        values = critic.compute_values(batch)["values"]
        returns = torch.randn(values.shape, generator=generator) * batch["response_mask"]
        critic_metrics = critic.update_critic(batch.union(Batch({"values": values, "returns": returns})))
        values_after = critic.compute_values(batch)["values"]
        if dist.get_rank() == 0:
            with open(args.out, "w") as f:
                json.dump({"metrics": metrics, "old": batch["old_log_probs"].tolist(), "after": after.tolist(),
                           "advantages": advantages.tolist(), "mask": batch["response_mask"].tolist(),
                           "ref_log_prob": ref_log_prob.tolist(), "critic_metrics": critic_metrics,
                           "values": values.tolist(), "values_after": values_after.tolist()}, f)


def tool_mask(length):
    """A response whose third and fourth tokens are a tool's (0), where it is long enough to end on a model token."""
    return [0 if 2 <= j <= 3 and length > 4 else 1 for j in range(length)]


def corrected(batch, mode):
    """The rollout-correction columns for engine log-probs that give each token the ratio π_old/π_rollout of `mode`."""
    from megarl.config import load_config
    from megarl.trainer.stages import correct_rollout
    from parallel.batch import Batch

    key = "algorithm.rollout_correction"
    options = ([f"{key}.rollout_is=token", f"{key}.rollout_is_threshold=10"] if mode == "half"
               else [f"{key}.rollout_rs=token", f"{key}.rollout_is_threshold=2"])
    log_ratio = math.log(0.5) if mode == "half" else 5.0
    mask = batch["response_mask"]
    engine = Batch({"old_log_probs": batch["old_log_probs"], "response_mask": mask,
                    "rollout_log_probs": batch["old_log_probs"] - log_ratio * mask})
    return correct_rollout(engine, load_config(overrides=options).algorithm.rollout_correction)[0]


if __name__ == "__main__":
    exit_process(main())
