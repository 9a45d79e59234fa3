"""The install the README promises: both packages, the console script, and the pinned stacks."""

import importlib.metadata
import shutil


def requirements(extra=None):
    marker = f'extra == "{extra}"'
    reqs = importlib.metadata.requires("megarl")
    return {r.split(";")[0].strip() for r in reqs if (marker in r if extra else "extra ==" not in r)}


def test_pins():
    assert {"megatron-core==0.16.1", "mbridge==0.15.1", "transformers==5.12.1"} <= requirements()
    assert {"torch==2.13.0", "pytest>=8", "hypothesis"} <= requirements("dev")
    assert {"sglang==0.5.16", "torch==2.11.0", "transformers==5.12.1", "tokenizers==0.22.2"} <= requirements("gpu")
    accelerators = requirements("accel")
    assert {"transformer-engine[core-cu13,pytorch]==2.20.2", "flash-attn"} == accelerators
    assert not accelerators & (requirements() | requirements("gpu"))  # never required


def test_console_script_and_packages():
    assert shutil.which("megarl")
    import megarl
    import parallel

    assert megarl.__version__ == importlib.metadata.version("megarl")
    assert parallel.__doc__
