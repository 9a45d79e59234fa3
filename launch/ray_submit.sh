#!/usr/bin/env bash
# Submit a megarl run to a running Ray cluster as a Ray job; the job's driver is the single controller.
#
#   launch/ray_submit.sh --recipe recipes/qwen3_0_6b_grpo_gsm8k.yaml [key=value ...]
#
# Start the cluster first (Ray's job server needs `pip install "ray[default]"`, as in the Docker image):
#   head:    ray start --head --num-gpus 8 --dashboard-host 0.0.0.0
#   others:  ray start --address <head>:6379 --num-gpus 8
# or let launch/slurm/ray_cluster.sbatch start it and submit.
#
# Environment (defaults in brackets): RAY_ADDRESS [http://127.0.0.1:8265: the head's job server],
# RUNTIME_ENV [launch/runtime_env.yaml], ENTRY [megarl.train: the Python module the job runs],
# NO_WAIT [unset: follow the job's logs until it ends; set: return once it is submitted].
# The job ships this checkout (runtime_env.yaml's working_dir): model and data paths in the recipe must exist
# on the cluster's nodes.
set -euo pipefail

cd "$(dirname "$0")/.."
args=(--address "${RAY_ADDRESS:-http://127.0.0.1:8265}" --runtime-env "${RUNTIME_ENV:-launch/runtime_env.yaml}")
if [[ -n ${NO_WAIT:-} ]]; then
    args+=(--no-wait)
fi
exec ray job submit "${args[@]}" -- python3 -m "${ENTRY:-megarl.train}" "$@"
