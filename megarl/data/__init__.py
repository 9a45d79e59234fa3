"""Data: raw datasets → parquet rows, the RL prompt dataset, resumable batching."""

from megarl.data.dataset import DataError, PromptLoader, RLDataset, truncate
from megarl.data.preprocess import PREPROCESSORS, PreprocessError, preprocess

__all__ = ["PREPROCESSORS", "DataError", "PreprocessError", "PromptLoader", "RLDataset", "preprocess", "truncate"]
