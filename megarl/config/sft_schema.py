"""The SFT recipe schema (`megarl sft`): typed, frozen dataclasses. Every SFT default lives here and nowhere else.

Key names follow verl's SFT trainer where it has one (docs/verl-keys.md maps the rest). The model and the
megatron mesh use the RL recipe's sections (`model.*`, `actor.megatron.*`), so the RL recipe that starts from
the SFT output can keep them as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from megarl.config.schema import MegatronConfig, ModelConfig, OptimConfig, RunConfig


@dataclass(frozen=True)
class SFTDataConfig:
    train_files: List[str] = field(default_factory=list)  # parquet files
    val_files: List[str] = field(default_factory=list)  # their token-mean loss is logged as val/loss
    prompt_key: str = "prompt"  # text, or a chat list encoded through the chat template exactly as RL prompts
    response_key: str = "extra_info.answer"  # dotted: a field of a struct column, as `megarl preprocess` writes
    max_length: int = 1024  # prompt + response + eos tokens
    truncation: str = "error"  # error | left (keep the end) | right (keep the start), for longer samples
    train_batch_size: int = 32  # samples per optimizer step, over all data-parallel ranks
    micro_batch_size_per_gpu: int = 4
    use_dynamic_bsz: bool = False  # micro-batches by token budget instead of sample count
    max_token_len_per_gpu: int = 16384  # the token budget of a micro-batch with use_dynamic_bsz
    shuffle: bool = True


@dataclass(frozen=True)
class SFTActorConfig:
    megatron: MegatronConfig = field(default_factory=MegatronConfig)


@dataclass(frozen=True)
class SFTTrainerConfig(RunConfig):
    experiment_name: str = "sft"  # the HF model goes to {output_dir}/hf
    test_freq: int = -1  # steps between val/loss evaluations; -1: after the last step only


@dataclass(frozen=True)
class SFTConfig:
    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    actor: SFTActorConfig = field(default_factory=SFTActorConfig)
    # SFT steps are few and large next to RL's: verl's SFT learning rate and schedule.
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5, lr_decay_style="cosine"))
    trainer: SFTTrainerConfig = field(default_factory=SFTTrainerConfig)

    @property
    def world_size(self) -> int:
        return self.trainer.nnodes * self.trainer.n_gpus_per_node

    @property
    def dp_size(self) -> int:
        return self.world_size // self.actor.megatron.model_parallel_size
