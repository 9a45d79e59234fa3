#!/usr/bin/env bash
# The README's main job: on 2 CPU cores in a few minutes, a tiny model is SFT-warm-started and then RL-trained on
# the bundled arithmetic task, and its reward rises. Every step is an ordinary megarl command:
#   megarl preprocess arithmetic → megarl init-model --shape tiny → megarl sft → megarl train
#
# rlhf is InstructGPT's pipeline: after SFT, the SFT model's sampled answers are ranked by rule
# (megarl sample-rankings), a reward model is trained on the rankings (megarl rm), and PPO learns from it alone.
# judge fine-tunes the SFT model into a judge of right and wrong sums (megarl sft on the task's judge split), and GRPO
# learns from the judge alone (reward.judge).
# moe does grpo's with a mixture-of-experts policy: the tiny shape as a Qwen3-MoE (init-model --experts 4), its
# experts split over the two processes in SFT and GRPO.
# tools trains a tiny model of its own, on 2-digit products, to call the python tool (rollout.multi_turn):
#   megarl preprocess products → megarl init-model --shape tiny --task products → megarl sft → megarl train
#
# Usage: bash launch/tiny_cpu.sh [grpo|ppo|dapo|rlhf|lora|judge|moe|tools] [key=value ...]  (overrides: the RL recipe's)
#   LAUNCHER=torchrun bash launch/tiny_cpu.sh grpo           (default: Ray, started locally)
#   NPROC=1 bash launch/tiny_cpu.sh grpo rollout.name=sglang (processes, or GPUs when CUDA is there; default 2)
#   RM_OVERRIDES="critic.megatron.transformer_impl=local" bash launch/tiny_cpu.sh rlhf  (the reward model stage's)
# Outputs go to outputs/tiny_cpu/: data/, init/ (random weights), sft/hf (the warm start), rm/hf (rlhf's reward
# model), judge_sft/hf (the judge recipe's judge), moe_init/ and moe_sft/hf (moe's), grpo/, ppo/, dapo/, rlhf/,
# judge/ or moe/ (metrics.jsonl, samples/ ...);
# tools_data/, tools_init/, tools_sft/ and tools/ for the tools recipe. Stages whose output exists are skipped.
set -euo pipefail
algorithm=${1:-grpo}
shift || true
case "$algorithm" in grpo|ppo|dapo|rlhf|lora|judge|moe|tools) ;;
  *) echo "usage: $0 [grpo|ppo|dapo|rlhf|lora|judge|moe|tools] [key=value ...]" >&2; exit 2 ;;
esac
out=outputs/tiny_cpu
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}

nproc=${NPROC:-2}

run() {  # megarl under the chosen launcher, on $nproc processes
  if [ "${LAUNCHER:-ray}" = torchrun ]; then
    python -m torch.distributed.run --nproc-per-node "$nproc" -m "megarl.$1" "${@:2}" trainer.n_gpus_per_node="$nproc"
  else
    python -m "megarl.$1" "${@:2}" trainer.n_gpus_per_node="$nproc"
  fi
}

if [ "$algorithm" = tools ]; then
  [ -f "$out/tools_data/train.parquet" ] || python -m megarl.cli preprocess products --output-dir "$out/tools_data"
  [ -f "$out/tools_init/config.json" ] || python -m megarl.cli init-model --shape tiny --task products \
    --out "$out/tools_init"
  [ -f "$out/tools_sft/hf/config.json" ] || run sft --recipe recipes/tiny_cpu_tools_sft.yaml
  run train --recipe recipes/tiny_cpu_tools.yaml "$@"
  exit
fi
[ -f "$out/data/judge.parquet" ] || python -m megarl.cli preprocess arithmetic --output-dir "$out/data"
if [ "$algorithm" = moe ]; then
  [ -f "$out/moe_init/config.json" ] || python -m megarl.cli init-model --shape tiny --experts 4 --out "$out/moe_init"
  [ -f "$out/moe_sft/hf/config.json" ] || run sft --recipe recipes/tiny_cpu_moe_sft.yaml
  run train --recipe recipes/tiny_cpu_moe.yaml "$@"
  exit
fi
[ -f "$out/init/config.json" ] || python -m megarl.cli init-model --shape tiny --out "$out/init"
[ -f "$out/sft/hf/config.json" ] || run sft --recipe recipes/tiny_cpu_sft.yaml
if [ "$algorithm" = rlhf ]; then
  for split in train test; do
    [ -f "$out/data/rankings_$split.parquet" ] || python -m megarl.cli sample-rankings --model "$out/sft/hf" \
      --data "$out/data/$split.parquet" --out "$out/data/rankings_$split.parquet" --samples 64 --per-prompt 4
  done
  # shellcheck disable=SC2086  # RM_OVERRIDES: words of key=value
  [ -f "$out/rm/hf/config.json" ] || run rm --recipe recipes/tiny_cpu_rm.yaml ${RM_OVERRIDES:-}
fi
if [ "$algorithm" = judge ]; then
  [ -f "$out/judge_sft/hf/config.json" ] || run sft --recipe recipes/tiny_cpu_judge_sft.yaml
fi
run train --recipe "recipes/tiny_cpu_$algorithm.yaml" "$@"
