import pytest

from tests.helpers import launch_workdir, make_tokenizer


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def tiny_workdir(tmp_path_factory):
    """The working directory of launch/tiny_cpu.sh's arithmetic recipes, shared by the slow recipe tests of a session
    (tests/test_tiny_recipes.py, tests/test_tiny_judge.py): the data, the tiny model and its SFT warm start are made
    once."""
    return launch_workdir(tmp_path_factory.mktemp("tiny"))
