import pytest

from tests.helpers import write_tiny_rl_setup


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The tiny chat model and GSM8K-format prompts that `tests.helpers.overrides` points `megarl train` at."""
    return write_tiny_rl_setup(tmp_path_factory.mktemp("loop"))
