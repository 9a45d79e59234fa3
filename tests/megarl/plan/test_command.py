"""`megarl plan`: the table, the verdicts and the exit codes (0 fits, 1 does not fit, 2 a wrong recipe or option)."""

import json
import re
import subprocess

import pytest

from megarl.cli import main
from megarl.models.shapes import SHAPES
from megarl.plan import command, machine

QWEN3_8B_RECIPE = "recipes/qwen3_8b_grpo_gsm8k_4gpu.yaml"

PHASES = ("gen", "old_log_prob", "ref", "update_actor", "sync", "host/node")


def plan(capsys, *args):
    code = main(["plan", "--recipe", QWEN3_8B_RECIPE, *args])
    out, err = capsys.readouterr()
    return code, out, err


def rows(out: str) -> dict[str, list[str]]:
    """The table's rows by phase: [phase, GiB, fits, parts...]."""
    cells = [line.split() for line in out.splitlines()]
    return {row[0]: row for row in cells if row and row[0] in PHASES}


def test_a_shape_that_fits(capsys):
    code, out, _ = plan(capsys, "--shape", "qwen3-8b", "--gpu-memory", "80", "--host-memory", "512")
    assert code == 0
    table = rows(out)
    assert list(table) == list(PHASES)  # GRPO with a KL loss: no critic phases
    assert all(row[2] == "yes" for row in table.values())
    assert "model: qwen3-8b: 36 layers" in out and "fits: every phase" in out


def test_a_shape_that_does_not_fit_names_the_cheapest_change(capsys):
    code, out, _ = plan(capsys, "--shape", "qwen3-8b", "--gpu-memory", "24", "--host-memory", "512",
                        "actor.megatron.optimizer_offload=false")
    assert code == 1
    assert rows(out)["update_actor"][2] == "NO"
    assert "does not fit:\n  - " in out and "update_actor needs" in out
    assert "cheapest change that fits: actor.megatron.optimizer_offload=true" in out


def test_host_memory_that_no_change_fits_is_named_with_what_a_node_needs(capsys):
    # The recipe's optimizer offload needs host memory that this CI machine's 23.5 GiB does not have: the answer is
    # the node's need and the GPU changes that go with it, not "no change fits".
    code, out, _ = plan(capsys, "--shape", "qwen3-8b", "--gpu-memory", "24", "--host-memory", "23.5")
    assert code == 1 and "no change tried fits" not in out
    need = re.search(r"^host memory is the limit: a node needs ([\d.]+) GiB, more than its 23.5 ", out, re.MULTILINE)
    changes = re.search(r"^  with (.+) every GPU phase fits$", out, re.MULTILINE)
    assert need and changes, out
    code, out, _ = plan(capsys, "--shape", "qwen3-8b", "--gpu-memory", "24", "--host-memory",
                        f"{float(need.group(1)) + 0.1}", *changes.group(1).split())
    assert code == 0 and "fits: every phase" in out
    code, out, _ = plan(capsys, "--shape", "qwen3-8b", "--gpu-memory", "80", "--host-memory", "23.5")
    assert code == 1 and "\n  every GPU phase fits as the recipe is" in out


def test_the_24_gb_recipe_fits_24_gib_gpus_with_its_host_memory(capsys):
    recipe = "recipes/qwen3_8b_grpo_gsm8k_4gpu_24gb.yaml"
    code = main(["plan", "--recipe", recipe, "--shape", "qwen3-8b", "--gpu-memory", "24", "--host-memory", "170"])
    out = capsys.readouterr().out
    assert code == 0 and all(row[2] == "yes" for row in rows(out).values()), out  # no update within its error
    main(["plan", "--recipe", recipe, "--shape", "qwen3-8b", "--gpu-memory", "24", "--host-memory", "23.5"])
    assert "\n  every GPU phase fits as the recipe is" in capsys.readouterr().out


TIGHT_18_LAYERS = ("--shape", "qwen3-8b", "--layers", "18", "--gpu-memory", "23", "--host-memory", "512",
                   "actor.megatron.tensor_model_parallel_size=2", "rollout.tensor_model_parallel_size=2",
                   "trainer.n_gpus_per_node=2", "actor.megatron.optimizer_offload=true",
                   "actor.megatron.grad_offload=true")


def test_an_update_within_the_plans_error_of_the_gpu_is_marked_tight(capsys):
    code, out, _ = plan(capsys, *TIGHT_18_LAYERS, "actor.ppo_max_token_len_per_gpu=4096")
    assert code == 0  # it fits
    table = rows(out)
    assert table["update_actor"][2] == "tight" and table["gen"][2] == "yes"
    assert "tight: update_actor 22.8 of 23.0 GiB: within 10 % of the GPU's memory" in out
    code, out, _ = plan(capsys, *TIGHT_18_LAYERS, "actor.ppo_max_token_len_per_gpu=4096",
                        "actor.megatron.grad_reduce_in_fp32=false")  # bf16 gradients: 19.6 GiB
    assert code == 0 and rows(out)["update_actor"][2] == "yes" and "tight" not in out


def test_a_directory_holding_only_config_json_and_fewer_layers(capsys, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SHAPES["qwen3-8b"]))
    code, out, _ = plan(capsys, f"model.path={tmp_path}", "--layers", "18", "--gpu-memory", "80",
                        "--host-memory", "512")
    assert code == 0
    assert f"model: {tmp_path}/config.json with 18 layers: 18 layers" in out


def test_overrides_on_both_sides_of_the_options(capsys):
    code, out, _ = plan(capsys, "actor.megatron.tensor_model_parallel_size=2", "--shape", "qwen3-8b",
                        "--gpu-memory", "80", "--host-memory", "512", "rollout.tensor_model_parallel_size=2",
                        "trainer.n_gpus_per_node=2")
    assert code == 0
    assert "1 node(s) × 2 GPUs; actor TP 2" in out


def test_wrong_recipes_and_options_exit_2(capsys, tmp_path, monkeypatch):
    code, _, err = plan(capsys, f"model.path={tmp_path}", "--gpu-memory", "80")
    assert code == 2 and "config.json" in err and "--shape NAME" in err
    code, _, err = plan(capsys, "--shape", "qwen3-8b", "--layers", "35", "--gpu-memory", "80",
                        "actor.megatron.pipeline_model_parallel_size=2", "actor.megatron.tensor_model_parallel_size=2")
    assert code == 2 and "pipeline_model_parallel_size=2 must divide the model's 35 layers (qwen3-8b" in err
    assert main(["plan", "--recipe", "recipes/absent.yaml", "--gpu-memory", "80"]) == 2
    assert "recipe recipes/absent.yaml does not exist" in capsys.readouterr().err
    monkeypatch.setattr(command, "gpu_memory_gib", lambda: None)  # a machine without nvidia-smi
    code, _, err = plan(capsys, "--shape", "qwen3-8b")
    assert code == 2 and "pass --gpu-memory GiB" in err
    with pytest.raises(SystemExit):
        plan(capsys, "--shape", "no-such-shape")


def test_the_gpu_memory_comes_from_nvidia_smi(monkeypatch):
    answers = {"81559\n81559\n": 81559 / 1024, "24564\n81559\n": 24564 / 1024, "[N/A]\n": None}
    monkeypatch.setattr(machine.shutil, "which", lambda name: f"/usr/bin/{name}")
    for stdout, expected in answers.items():
        def nvidia_smi(*args, out=stdout, **kwargs):
            return subprocess.CompletedProcess(args, 0, out, "")

        monkeypatch.setattr(machine.subprocess, "run", nvidia_smi)
        assert machine.gpu_memory_gib() == expected
    monkeypatch.setattr(machine.shutil, "which", lambda name: None)
    assert machine.gpu_memory_gib() is None
