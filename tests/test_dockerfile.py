"""The Docker image and setup.py agree: the image installs megarl's own extras and its base torch is the
gpu extra's torch; the accel extra pins the Transformer Engine that ran on the GPU machine."""

import importlib.metadata
import re

from tests.helpers import REPO_ROOT

DOCKERFILE = (REPO_ROOT / "Dockerfile").read_text()


def gpu_pins() -> dict[str, str]:
    pins = {}
    for requirement in importlib.metadata.requires("megarl"):
        spec, _, marker = requirement.partition(";")
        if 'extra == "gpu"' in marker and "==" in spec:
            name, version = spec.strip().split("==")
            pins[name] = version
    return pins


def test_base_torch_is_the_gpu_extras_torch():
    torch_arg = re.search(r"ARG TORCH_VERSION=(\S+)", DOCKERFILE).group(1)
    base = re.search(r"ARG BASE_IMAGE=pytorch/pytorch:([0-9.]+)-", DOCKERFILE).group(1)
    assert torch_arg == base == gpu_pins()["torch"]


def test_image_pins_nothing_but_what_setup_py_pins():
    pinned = dict(re.findall(r"([A-Za-z0-9_.\-\[\]]+)==([0-9][\w.]*)", DOCKERFILE))
    pins = {**gpu_pins(), **{r.split("==")[0]: r.split("==")[1] for r in importlib.metadata.requires("megarl")
                              if "==" in r and ";" not in r}}
    assert all(pins.get(name) == version for name, version in pinned.items()), pinned
    assert 'pip install ".[gpu,loggers]"' in DOCKERFILE and '".[accel]"' in DOCKERFILE


def test_accel_pins_the_transformer_engine_the_gpu_tests_ran():
    staged = re.search(r"^TE_VER=(\S+)$", (REPO_ROOT / "benchmarks/accel/stage_te.sh").read_text(), re.M).group(1)
    accel = [spec.strip() for spec, _, marker in (r.partition(";") for r in importlib.metadata.requires("megarl"))
             if 'extra == "accel"' in marker]
    assert any(spec.startswith("transformer-engine[") and spec.endswith(f"=={staged}") for spec in accel), accel


def test_image_carries_the_package_recipes_and_launchers():
    for path in ("megarl", "parallel", "recipes", "launch"):
        assert f"COPY {path} ./{path}" in DOCKERFILE
