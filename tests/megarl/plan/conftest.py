import pytest

from megarl.config import load_config
from megarl.plan import plan_inputs

QWEN3_8B_RECIPE = "recipes/qwen3_8b_grpo_gsm8k_4gpu.yaml"


@pytest.fixture
def inputs_for():
    """PlanInputs of the Qwen3-8B GRPO recipe (or `recipe`) with overrides, on the qwen3-8b shape."""

    def make(*overrides, gpu_gib=80.0, host_gib=1000.0, recipe=QWEN3_8B_RECIPE, layers=None):
        return plan_inputs(load_config(recipe, overrides), gpu_gib, host_gib, "qwen3-8b", layers)[0]

    return make
