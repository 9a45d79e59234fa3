"""The reward-model recipe schema (`megarl rm`): typed, frozen dataclasses. Every reward-model default lives here
and nowhere else.

The model is trained on the critic's trunk (a scalar value head), so its megatron mesh is the RL recipe's
`critic.megatron` section: an RL recipe whose critic starts from the reward model's output keeps it as it is.
Key names otherwise follow the SFT recipe's (`megarl sft`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from megarl.config.schema import MegatronConfig, ModelConfig, OptimConfig, RunConfig


@dataclass(frozen=True)
class RMDataConfig:
    train_files: List[str] = field(default_factory=list)  # parquet files of rankings
    val_files: List[str] = field(default_factory=list)  # held-out rankings: val/rm/loss and val/rm/accuracy
    prompt_key: str = "prompt"  # text, or a chat list encoded through the chat template exactly as RL prompts
    # A row ranks its responses with a list column (best first), or is a preference pair of two columns; dotted
    # keys reach into struct columns.
    responses_key: str = "responses"
    chosen_key: str = "chosen"
    rejected_key: str = "rejected"
    max_length: int = 1024  # prompt + response + eos tokens, for every response of a ranking
    train_batch_size: int = 32  # rankings per optimizer step, over all data-parallel ranks
    micro_batch_size_per_gpu: int = 4  # rankings per micro-batch: all K responses of a ranking go through together
    use_dynamic_bsz: bool = False  # micro-batches by token budget (whole rankings) instead of ranking count
    max_token_len_per_gpu: int = 16384  # the token budget of a micro-batch with use_dynamic_bsz
    val_batch_size: Optional[int] = None  # rankings per validation batch; None: data.train_batch_size
    shuffle: bool = True


@dataclass(frozen=True)
class RMCriticConfig:
    megatron: MegatronConfig = field(default_factory=MegatronConfig)


@dataclass(frozen=True)
class RMLossConfig:
    margin: float = 0.0  # each pair's loss is −log σ(r_better − r_worse − margin)


@dataclass(frozen=True)
class RMTrainerConfig(RunConfig):
    experiment_name: str = "rm"  # the HF reward model goes to {output_dir}/hf
    test_freq: int = -1  # steps between validations on data.val_files; -1: after the last step only


@dataclass(frozen=True)
class RMConfig:
    data: RMDataConfig = field(default_factory=RMDataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)  # the policy (usually SFT'd) the trunk starts from
    critic: RMCriticConfig = field(default_factory=RMCriticConfig)
    rm: RMLossConfig = field(default_factory=RMLossConfig)
    # Close to InstructGPT's reward-model training: one epoch, lr 9e-6 on a cosine schedule.
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5, lr_decay_style="cosine"))
    trainer: RMTrainerConfig = field(default_factory=RMTrainerConfig)

    @property
    def world_size(self) -> int:
        return self.trainer.nnodes * self.trainer.n_gpus_per_node

    @property
    def dp_size(self) -> int:
        return self.world_size // self.critic.megatron.model_parallel_size

    @property
    def validation_batch_size(self) -> int:
        return self.data.val_batch_size or self.data.train_batch_size
