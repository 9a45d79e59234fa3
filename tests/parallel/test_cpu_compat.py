"""The CPU shim patches process-global state, so it is exercised in a fresh interpreter."""

import subprocess
import sys

from tests.helpers import REPO_ROOT

PROBE = """
import torch
from parallel import cpu_compat
assert cpu_compat.enable() and cpu_compat.enable()  # active and idempotent
x = torch.empty(3, device="cuda")
assert x.device.type == "cpu" and torch.zeros(2, device=0).device.type == "cpu"
assert x.cuda() is x and x.to("cuda:0").device.type == "cpu"
assert x.type() == "torch.cuda.FloatTensor" and x.bfloat16().type() == "torch.cuda.BFloat16Tensor"
assert torch.cuda.current_device() == "cpu"
state = torch.cuda.get_rng_state(); a = torch.rand(2); torch.cuda.set_rng_state(state)
assert torch.equal(a, torch.rand(2))
from megatron.core.optimizer import optimizer
p = torch.nn.Parameter(torch.ones(4)); p.grad = torch.full((4,), 3.0)
optimizer.clip_grad_by_total_norm_fp32([p], max_norm=3.0, total_norm=6.0)
assert torch.allclose(p.grad, torch.full((4,), 1.5), atol=1e-5)
print("ok")
"""


def test_shim_makes_megatrons_cuda_calls_cpu_safe():
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


# A process that joins a process group without a launcher's placing it on CPU keeps torch's and megatron's own.
NOT_BY_INIT = """
import torch
from megatron.core.optimizer import optimizer
own = (torch.cuda.empty_cache, optimizer.clip_grad_by_total_norm_fp32)
from parallel import topology
topology.init_distributed()
assert (torch.cuda.empty_cache, optimizer.clip_grad_by_total_norm_fp32) == own
print("ok")
"""


def test_joining_a_process_group_patches_nothing():
    proc = subprocess.run([sys.executable, "-c", NOT_BY_INIT], capture_output=True, text=True, timeout=120,
                          cwd=REPO_ROOT)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]

