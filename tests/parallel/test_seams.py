"""The library members megarl replaces or overrides (parallel/seams.py) are there with the parameters megarl's
stand-ins are written for. Read in a process of its own: this one may run megatron on CPU (parallel/cpu_compat.py),
whose stand-ins then take the library's place."""

import json
import subprocess
import sys

from tests.helpers import ENV, REPO_ROOT

CHECK = "import json; from parallel.seams import SEAMS; print(json.dumps([s.problem() for s in SEAMS]))"


def test_every_seam_is_as_megarl_expects():
    proc = subprocess.run([sys.executable, "-c", CHECK], cwd=REPO_ROOT, env=ENV, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [p for p in json.loads(proc.stdout.splitlines()[-1]) if p] == []


def test_a_changed_seam_names_what_changed():
    from parallel.seams import Seam

    assert Seam("megatron.core.utils", "local_multi_tensor_l2_norm", ("tensors",)).problem() == (
        "megatron.core.utils.local_multi_tensor_l2_norm: parameters ('chunk_size', 'noop_flag', 'tensor_lists', "
        "'per_tensor', 'args'), megarl's stand-in is written for ('tensors',)")
    assert Seam("mbridge.core.LLMBridge", "_no_such_hook", ()).problem().startswith(
        "mbridge.core.LLMBridge._no_such_hook: gone")
