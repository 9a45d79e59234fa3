"""Data: raw datasets → parquet rows, the RL prompt dataset, the SFT dataset, resumable batching."""

from megarl.data.dataset import DataError, PromptLoader, RLDataset, truncate
from megarl.data.preprocess import PREPROCESSORS, PreprocessError, preprocess
from megarl.data.sft_dataset import SFTDataset, sft_batch

__all__ = ["PREPROCESSORS", "DataError", "PreprocessError", "PromptLoader", "RLDataset", "SFTDataset", "preprocess",
           "sft_batch", "truncate"]
