"""megarl: Megatron-centric RL post-training (PPO and the GRPO family) for HF-format LLMs."""

__version__ = "0.1.0"
