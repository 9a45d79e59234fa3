"""megarl: Megatron-centric RL post-training for LLMs (PPO and the GRPO family)."""

from setuptools import find_packages, setup

# One version of transformers that both the CPU stack and SGLang 0.5.16 accept.
TRANSFORMERS = "transformers==5.12.1"

install_requires = [
    "torch>=2.6",
    "megatron-core==0.16.1",
    "mbridge==0.15.1",
    "einops",  # mbridge imports it without declaring it
    "ray[default]>=2.40",  # [default]: the job server that `ray job submit` (launch/ray_submit.sh) talks to
    "omegaconf>=2.3",
    "datasets>=3.0",
    "pyarrow",
    "psutil",  # megatron's async checkpoint save hangs without it
    TRANSFORMERS,
    "tokenizers",
    "tqdm",  # the console logger's progress bar
    "plotly>=5.20",  # `megarl view` inlines its offline plotly.js bundle, so the page needs no network
]

extras_require = {
    # The CPU test stack; torch 2.13.0 is the local CPU build on the project's machines.
    "dev": [
        "torch==2.13.0",
        "pytest>=8",
        "pytest-timeout",
        "hypothesis",
        "math-verify>=0.7",
        "tensorboard",
        "wandb",
        "peft",  # the tests load megarl export's PEFT adapter directory with PEFT itself
        "mypy==2.4.1",  # tests/test_types.py: the driver↔worker boundary type-checks (mypy.ini)
    ],
    # Metrics loggers beyond the console and metrics.jsonl (trainer.logger).
    "loggers": ["tensorboard", "wandb"],
    # GPU training and rollout: SGLang and the versions it pins.
    "gpu": [
        "sglang==0.5.16",
        "torch==2.11.0",
        TRANSFORMERS,
        "tokenizers==0.22.2",
    ],
    # Optional accelerators: used where a role's config names them, never required. Transformer Engine at the version
    # benchmarks/accel/stage_te.sh stages and tests/gpu/test_transformer_engine_gpu.py runs (CUDA 13 build).
    "accel": [
        "transformer-engine[pytorch,core-cu13]==2.20.2",
        "flash-attn",
    ],
    "math-verify": ["math-verify>=0.7"],
}

setup(
    name="megarl",
    version="0.1.0",
    description=__doc__,
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["megarl", "megarl.*", "parallel", "parallel.*"]),
    package_data={"megarl": ["py.typed"], "megarl.view": ["*.js", "*.css"]},
    install_requires=install_requires,
    extras_require=extras_require,
    entry_points={"console_scripts": ["megarl = megarl.cli:console"]},
)
