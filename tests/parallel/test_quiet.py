"""Library noise stays off the console once `parallel` (or `megarl`) is imported, and MEGARL_VERBOSE keeps it."""

import os
import subprocess
import sys

from tests.helpers import ENV, REPO_ROOT

IMPORTS = "import parallel, megatron.core.optimizer, megatron.core.models.gpt.gpt_layer_specs"
FALLBACK = "Transformer Engine and Apex are not installed"


def import_warnings(env) -> str:
    proc = subprocess.run([sys.executable, "-c", IMPORTS], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr


def test_megatrons_fallback_warnings_are_kept_off_unless_verbose():
    quiet = {key: value for key, value in ENV.items() if key != "MEGARL_VERBOSE"}
    assert FALLBACK not in import_warnings(quiet) and "Apex is not installed" not in import_warnings(quiet)
    assert FALLBACK in import_warnings({**quiet, "MEGARL_VERBOSE": "1"})


def test_be_verbose_undoes_the_filters_and_keeps_them_off_in_child_processes():
    code = ("import warnings, os, parallel; from parallel.quiet import be_verbose; be_verbose(); "
            "warnings.warn('Apex is not installed. x'); print(os.environ['MEGARL_VERBOSE'], "
            "'HF_HUB_DISABLE_PROGRESS_BARS' in os.environ)")
    env = {key: value for key, value in ENV.items() if key not in ("MEGARL_VERBOSE", "HF_HUB_DISABLE_PROGRESS_BARS")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.split() == ["1", "False"] and "Apex is not installed" in proc.stderr
    assert os.environ.get("MEGARL_VERBOSE") is None  # this test process is untouched


def test_a_spawned_child_running_its_megarl_main_again_is_not_announced():
    """A child a `python -m megarl.X` process spawns imports megarl.X before runpy runs it as __mp_main__."""
    code = "import megarl.rng, runpy; runpy.run_module('megarl.rng', run_name='__mp_main__')"
    quiet = {key: value for key, value in ENV.items() if key != "MEGARL_VERBOSE"}
    for env, announced in ((quiet, False), ({**quiet, "MEGARL_VERBOSE": "1"}, True)):
        proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert ("found in sys.modules after import of package 'megarl'" in proc.stderr) is announced


def test_one_note_when_transformer_engine_is_missing_or_installed_and_not_asked_for():
    from parallel.quiet import accelerators_notice

    assert accelerators_notice(installed=False, asked=False).startswith("note: Transformer Engine and Apex are not")
    assert accelerators_notice(installed=True, asked=False) == (
        "note: Transformer Engine is installed but not used: megarl runs its tested local layers (megatron."
        "transformer_impl auto or local); set actor.megatron.transformer_impl=transformer_engine for TE's, not yet "
        "verified by megarl's GPU tests")
    assert accelerators_notice(installed=True, asked=True) is None
