"""Typed recipe config: schema (defaults), loading with dotted overrides, validation."""

from megarl.config.loader import ConfigError, describe_keys, load_config, save_config, to_yaml
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
    "RefConfig",
    "RewardConfig",
    "RolloutConfig",
    "TrainerConfig",
    "ValSamplingConfig",
    "describe_keys",
    "load_config",
    "read_hf_config",
    "save_config",
    "to_yaml",
    "validate_config",
]
