#!/usr/bin/env bash
# Seed 003's Qwen3-8B GRPO run: the 0.6B script with its sizes in variables, TP 4 and the optimizer on the host.
set -xeuo pipefail

NGPUS=4
NBATCHS=8
NMICROBATCHS=2
NSAMPLES=8
export USE_MBRIDGE=FALSE
MODEL_PATH=${MODEL_PATH:-/data/Qwen3-8B-Base}
PROJECT="verl_grpo_xr1750"

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    algorithm.use_kl_in_reward=False \
    data.train_files=./xr1-750/train.parquet \
    data.val_files=./xr1-750/test.parquet \
    data.train_batch_size=${NBATCHS} \
    data.max_prompt_length=512 \
    data.max_response_length=1024 \
    data.filter_overlong_prompts=True \
    data.truncation='error' \
    actor_rollout_ref.model.path="${MODEL_PATH}" \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.actor.ppo_mini_batch_size=$NMICROBATCHS \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$NMICROBATCHS \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.entropy_coeff=0 \
    ++actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.strategy="megatron" \
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=$NGPUS \
    actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=1 \
    actor_rollout_ref.actor.megatron.context_parallel_size=1 \
    actor_rollout_ref.actor.megatron.use_mbridge=$USE_MBRIDGE \
    actor_rollout_ref.actor.megatron.optimizer_offload=True \
    actor_rollout_ref.actor.megatron.param_offload=False \
    actor_rollout_ref.actor.megatron.grad_offload=False \
    actor_rollout_ref.rollout.name=sglang \
    actor_rollout_ref.rollout.tensor_model_parallel_size=$NGPUS \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
    actor_rollout_ref.rollout.n=$NSAMPLES \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.val_kwargs.do_sample=True \
    actor_rollout_ref.rollout.load_format=auto \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=$NMICROBATCHS \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=$NMICROBATCHS \
    trainer.critic_warmup=0 \
    trainer.logger='["console","wandb"]' \
    trainer.project_name="$PROJECT" \
    trainer.experiment_name='qwen3_8B_RL_Zero' \
    trainer.n_gpus_per_node=$NGPUS \
    trainer.nnodes=1 \
    trainer.save_freq=50 \
    trainer.test_freq=20 \
    trainer.total_epochs=2 "$@"
