import pytest
import torch

from parallel import cpu_compat

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_shim_is_inert_with_cuda():
    assert cpu_compat.enable() is False
    assert torch.empty(1, device="cuda").is_cuda
