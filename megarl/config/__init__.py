"""Typed recipe config: schema (defaults), loading with dotted overrides, validation; RL recipes (`megarl train`),
SFT recipes (`megarl sft`, loaded with `schema=SFT_RECIPE`) and reward-model recipes (`megarl rm`,
`schema=RM_RECIPE`)."""

from megarl.config.errors import ConfigError
from megarl.config.loader import RL_RECIPE, RecipeSchema, describe_keys, load_config, save_config, to_yaml
from megarl.config.schema import (
    ActorConfig,
    AlgorithmConfig,
    CriticConfig,
    DataConfig,
    KLControlConfig,
    MegaRLConfig,
    MegatronConfig,
    ModelConfig,
    OptimConfig,
    RefConfig,
    RewardConfig,
    RolloutConfig,
    TrainerConfig,
    ValSamplingConfig,
)
from megarl.config.sft_schema import SFTActorConfig, SFTConfig, SFTDataConfig, SFTTrainerConfig
from megarl.config.sft_validate import SFT_RECIPE, validate_sft_config
from megarl.config.rm_schema import RMConfig, RMDataConfig, RMTrainerConfig
from megarl.config.rm_validate import RM_RECIPE, validate_rm_config
from megarl.config.on_disk import check_inputs_exist
from megarl.config.validate import read_hf_config, validate_config

__all__ = [
    "ActorConfig",
    "AlgorithmConfig",
    "ConfigError",
    "CriticConfig",
    "DataConfig",
    "KLControlConfig",
    "MegaRLConfig",
    "MegatronConfig",
    "ModelConfig",
    "OptimConfig",
    "RL_RECIPE",
    "RMConfig",
    "RMDataConfig",
    "RMTrainerConfig",
    "RM_RECIPE",
    "RecipeSchema",
    "RefConfig",
    "RewardConfig",
    "RolloutConfig",
    "SFTActorConfig",
    "SFTConfig",
    "SFTDataConfig",
    "SFTTrainerConfig",
    "SFT_RECIPE",
    "TrainerConfig",
    "ValSamplingConfig",
    "check_inputs_exist",
    "describe_keys",
    "load_config",
    "read_hf_config",
    "save_config",
    "to_yaml",
    "validate_config",
    "validate_rm_config",
    "validate_sft_config",
]
