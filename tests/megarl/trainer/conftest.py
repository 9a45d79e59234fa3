import datasets
import pytest

from tests.helpers import make_chat_model


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The tiny chat model and GSM8K-format prompts that `tests.helpers.overrides` points `megarl train` at."""
    root = tmp_path_factory.mktemp("loop")
    make_chat_model(root / "model")
    rows = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"What is {a} + {b}? ####"}],
             "reward_model": {"ground_truth": str(a + b)}} for a, b in [(1, 2), (3, 4), (2, 2), (5, 1)]]
    datasets.Dataset.from_list(rows).to_parquet(str(root / "train.parquet"))
    return root
