#!/usr/bin/env bash
# Run megarl under torchrun: one process per GPU, no Ray needed.
#
# One node, all of its GPUs:
#   launch/torchrun.sh --recipe recipes/qwen3_0_6b_grpo_gsm8k.yaml [key=value ...]
# Several nodes (run this on every node, with the same MASTER_ADDR: node 0's address):
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=node0 launch/torchrun.sh --recipe R.yaml trainer.nnodes=2
#   NNODES=2 NODE_RANK=1 MASTER_ADDR=node0 launch/torchrun.sh --recipe R.yaml trainer.nnodes=2
# Under SLURM, launch/slurm/torchrun.sbatch does this for you.
#
# Environment (defaults in brackets): NPROC_PER_NODE [the node's GPU count, or 1 without GPUs], NNODES [1],
# NODE_RANK [0], MASTER_ADDR [127.0.0.1], MASTER_PORT [29500], PYTHON [python3],
# ENTRY [megarl.train: the Python module every process runs].
# The arguments go to that module. The recipe's trainer.nnodes × trainer.n_gpus_per_node must equal
# NNODES × NPROC_PER_NODE; megarl stops with an error naming both if they differ.
set -euo pipefail

PYTHON=${PYTHON:-python3}
if [[ -z ${NPROC_PER_NODE:-} ]]; then
    NPROC_PER_NODE=$("$PYTHON" -c "import torch; print(max(torch.cuda.device_count(), 1))")
fi

ENTRY=${ENTRY:-megarl.train}
if [[ $ENTRY == megarl.train || $ENTRY == megarl.sft ]]; then
    # The recipe is checked in one process first: a mistake is then one line naming the key, not a traceback
    # from every rank and torchrun's report of each failed child.
    "$PYTHON" -m "$ENTRY" --dry-run "$@" >/dev/null
fi

exec "$PYTHON" -m torch.distributed.run \
    --nnodes "${NNODES:-1}" \
    --nproc-per-node "$NPROC_PER_NODE" \
    --node-rank "${NODE_RANK:-0}" \
    --master-addr "${MASTER_ADDR:-127.0.0.1}" \
    --master-port "${MASTER_PORT:-29500}" \
    -m "$ENTRY" "$@"
