import pytest

from tests.helpers import make_tokenizer


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("tokenizer"))
