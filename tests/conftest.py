import os
import subprocess
import sys

import pytest
import torch

from tests.helpers import ENV, ZYGOTE, ZYGOTE_SOCKET, launch_workdir, make_tokenizer


@pytest.fixture(scope="session", autouse=True)
def zygote():
    """The fork server of tests/zygote/ for the processes tests start (CPU only: a fork after CUDA is unsafe)."""
    if "MEGARL_TEST_ZYGOTE" not in ENV or torch.cuda.is_available():
        yield
        return
    env = {k: v for k, v in ENV.items() if k != "MEGARL_TEST_ZYGOTE"}
    server = subprocess.Popen([sys.executable, str(ZYGOTE / "server.py"), str(ZYGOTE_SOCKET)], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert server.stdout.readline().strip() == "ready"
    yield
    server.terminate()
    server.wait(timeout=30)
    if ZYGOTE_SOCKET.exists():
        os.unlink(ZYGOTE_SOCKET)


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def tiny_workdir(tmp_path_factory):
    """The working directory of launch/tiny_cpu.sh's arithmetic recipes, shared by the slow recipe tests of a session
    (tests/test_tiny_recipes.py, tests/test_tiny_judge.py): the data, the tiny model and its SFT warm start are made
    once."""
    return launch_workdir(tmp_path_factory.mktemp("tiny"))
