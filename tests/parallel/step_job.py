"""The driver of the controller tests, the same program under both launchers:

    python -m tests.parallel.step_job MODEL_DIR OUT.json                         # Ray: 2 worker processes
    torchrun --nproc-per-node 2 -m tests.parallel.step_job MODEL_DIR OUT.json    # torchrun: 2 SPMD ranks

It runs TinyStepWorker's TP=2 step and writes the collected numbers (rank 0 under torchrun). With
--fail-rank R, rank R raises (or exits: --fail-how exit) while the other waits in a collective; the JSON records the error the driver got.
"""

import argparse
import json
import sys
import time

import torch
import torch.distributed as dist

from megarl.process_exit import exit_process


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("out")
    parser.add_argument("--fail-rank", type=int)
    parser.add_argument("--fail-how", choices=["raise", "exit"], default="raise")
    parser.add_argument("--without-ray", action="store_true", help="make `import ray` fail, as if not installed")
    args = parser.parse_args()
    if args.without_ray:
        from tests.helpers import hide_ray

        hide_ray()

    from parallel.batch import Batch
    from parallel.controller import PoolSpec, WorkerError
    from parallel.launcher import start_cluster
    from tests.parallel.step_worker import TinyStepWorker

    with start_cluster([PoolSpec("main", (2,))], "auto", timeout_s=120) as cluster:
        actor = cluster["main"].spawn("actor", TinyStepWorker, args.model_dir, 2)
        if args.fail_rank is not None:
            start = time.monotonic()
            try:
                actor.call(TinyStepWorker.fail_on, args.fail_rank, args.fail_how)
                result = {"error": None}
            except WorkerError as e:
                result = {"error": str(e), "role": e.role, "rank": e.rank, "seconds": time.monotonic() - start}
                print(f"error: {e}", file=sys.stderr)
        else:
            lengths = torch.tensor([12, 7, 9, 5])
            input_ids = (torch.arange(4 * 12).reshape(4, 12) * 7 + 3) % 120
            batch = Batch({"input_ids": input_ids, "lengths": lengths}, {"uid": ["a", "b", "c", "d"]})
            out = actor.call(TinyStepWorker.step, batch)
            all_reduced, workers = actor.call(TinyStepWorker.all_reduce), actor.call(TinyStepWorker.describe)
            bus_bandwidth = actor.call(TinyStepWorker.all_reduce_bus_bandwidth) if torch.cuda.is_available() else None
            # A second role in the same processes shares their megatron mesh; one that wants another cannot.
            reference = cluster["main"].spawn("reference", TinyStepWorker, args.model_dir, 2)
            colocated = reference.call(TinyStepWorker.logprobs, batch)["logprobs"].tolist()
            try:
                cluster["main"].spawn("critic", TinyStepWorker, args.model_dir, 1)
                other_mesh_error = None
            except WorkerError as e:
                other_mesh_error = str(e)
            result = {
                "launcher": cluster.launcher,
                "logprobs_before": out["logprobs_before"].tolist(),
                "logprobs_after": out["logprobs_after"].tolist(),
                "grad_norm": out["grad_norm"][0].item(),
                "loss": out["loss"][0].item(),
                "all_reduce": all_reduced,
                "workers": workers,
                "ray_imported": sys.modules.get("ray") is not None,
                "colocated_reference_logprobs": colocated,
                "other_mesh_error": other_mesh_error,
            }
            if bus_bandwidth is not None:
                result["all_reduce_bus_gb_per_s"] = bus_bandwidth
        if not dist.is_initialized() or dist.get_rank() == 0:  # the Ray driver, or torchrun's rank 0
            with open(args.out, "w") as f:
                json.dump(result, f)
    return 1 if result.get("error") else 0


if __name__ == "__main__":
    exit_process(main())
