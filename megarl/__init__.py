"""megarl: Megatron-centric RL post-training (PPO and the GRPO family) for HF-format LLMs."""

import parallel  # noqa: F401  (its import keeps library noise off the console: parallel/quiet.py)

__version__ = "0.1.0"
