"""Test helpers shared by test modules: real (tiny) artifacts made in the test, never downloaded, and the
subprocess runs (torchrun, Ray, `megarl train`) several tests start."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import pytest

from megarl.models.accelerators import transformer_engine_available

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("MEGARL_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
# For the subprocesses: the repository importable, a local Ray without token auth, wandb writing offline.
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "WANDB_MODE": "offline",
       "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
# On CPU, the processes started with ENV fork from tests/zygote/server.py (conftest.py starts it), their imports done.
ZYGOTE = REPO_ROOT / "tests" / "zygote"
ZYGOTE_SOCKET = Path(tempfile.gettempdir()) / f"megarl-zygote-{os.getpid()}.sock"
# For tests whose subject is the process tree itself (pids, a launcher's children): every process started afresh.
UNFORKED_ENV = dict(ENV)
if os.environ.get("MEGARL_TEST_ZYGOTE", "1") != "0":
    ENV.update(PYTHONPATH=f"{ZYGOTE}{os.pathsep}{ENV['PYTHONPATH']}", MEGARL_TEST_ZYGOTE=str(ZYGOTE_SOCKET))
# For a GPU test's subprocesses: the repository importable, on the machine's first GPU.
GPU0_ENV = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "CUDA_VISIBLE_DEVICES": "0"}
# SGLang as the lent GPU machines run it (the trimmed kernels: triton attention, torch sampling), at a small share.
SGLANG = ["rollout.name=sglang", "rollout.gpu_memory_utilization=0.3", "rollout.engine_kwargs.attention_backend=triton",
          "rollout.engine_kwargs.sampling_backend=pytorch", "rollout.engine_kwargs.cuda_graph_max_bs_decode=64"]
DIST_WORKER = REPO_ROOT / "tests" / "megarl" / "models" / "dist_worker.py"
ON_TRANSFORMER_ENGINE = pytest.mark.skipif(
    not transformer_engine_available(),
    reason="Transformer Engine is not installed (on the GPU machine: benchmarks/accel/install_te.sh)")
# A GPU test's layers: megatron-core's local ones, and Transformer Engine's where it imports.
TRANSFORMER_IMPLS = ["local", pytest.param("transformer_engine", marks=ON_TRANSFORMER_ENGINE)]
LAYOUTS = {"tp2": (2, 1, 1), "pp2": (1, 2, 1), "cp2": (1, 1, 2), "dp2": (1, 1, 1)}  # name: (tp, pp, cp)


def max_abs(a, b) -> float:
    """The largest |a − b| over two lists of equal-length lists of numbers."""
    return max(abs(x - y) for p, q in zip(a, b) for x, y in zip(p, q))


def mean_abs(a, b) -> float:
    """The mean |a − b| over two lists of equal-length lists of numbers."""
    diffs = [abs(x - y) for p, q in zip(a, b) for x, y in zip(p, q)]
    return sum(diffs) / len(diffs)


def make_tokenizer(out_dir: Path, corpus: list[str] | None = None, vocab_size: int = 400, chat_template=None):
    """A byte-level BPE tokenizer with a chat template (default ChatML), saved in `out_dir` and loaded back."""
    from megarl.models.tokenizer import CHATML_TEMPLATE, DEFAULT_CORPUS, build_tokenizer

    return build_tokenizer(out_dir, corpus or DEFAULT_CORPUS[:3] + (DEFAULT_CORPUS[4],), vocab_size,
                           chat_template or CHATML_TEMPLATE)


def make_chat_model(out_dir: Path, seed: int = 0) -> Path:
    """A 2-layer Qwen2 with random weights and the ChatML tokenizer of `make_tokenizer`, saved in `out_dir`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = make_tokenizer(out_dir)
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    Qwen2ForCausalLM(config).save_pretrained(out_dir)
    return out_dir


def make_reward_model(out_dir: Path, seed: int = 1, vocab_size: int = 400) -> Path:
    """`make_chat_model`'s trunk as a HF sequence-classification checkpoint with one label and a random
    `score.weight`: a reward model as `megarl rm` writes one. Another `vocab_size` gives it a tokenizer of its own
    (the policy's has 400 tokens)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    policy = make_chat_model(out_dir.with_name(out_dir.name + "-policy"), seed)
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(policy, num_labels=1)
    model.save_pretrained(out_dir)
    make_tokenizer(out_dir, vocab_size=vocab_size)
    return out_dir


def make_digit_judge(out_dir: Path, seed: int = 3) -> Path:
    """`make_chat_model` as a judge that writes digits only (`write_digits_only`)."""
    make_chat_model(out_dir, seed)
    return write_digits_only(out_dir)


def write_digits_only(model_dir: Path) -> Path:
    """The Qwen2 checkpoint in `model_dir` rewired to write digits only, so that a judge's every output has a number
    to parse: one residual dimension holds a constant (every embedding has 1 there, no layer writes to it) that only
    the ten digits' output rows read. Which digit it writes still depends on the other dimensions."""
    import torch
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    model, tokenizer = Qwen2ForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)
    digits = [tokenizer.convert_tokens_to_ids(str(d)) for d in range(10)]
    if model.config.tie_word_embeddings:  # the output rows get their own copy: the constant lives in the embeddings
        model.lm_head.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())
        model.config.tie_word_embeddings = False
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 1.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0] = 0.0
            layer.mlp.down_proj.weight[0] = 0.0
        model.lm_head.weight[:, 0] = 0.0
        model.lm_head.weight[digits, 0] = 50.0
    model.save_pretrained(model_dir)
    return model_dir


def make_model(family: str, path: Path, **config_args) -> Path:
    """A 2-layer model of `family` (qwen2, qwen3, qwen3_moe or llama) with random weights and a 128-token vocabulary;
    `config_args` override its config."""
    import torch
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
        Qwen3MoeConfig,
        Qwen3MoeForCausalLM,
    )

    config_cls, model_cls = {
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
        "qwen3": (Qwen3Config, Qwen3ForCausalLM),
        "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM),
        "llama": (LlamaConfig, LlamaForCausalLM),
    }[family]
    # Qwen3-MoE: 4 experts, 2 per token, in both layers
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
               mlp_only_layers=[]) if family == "qwen3_moe" else {}
    torch.manual_seed(0)
    shape = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                 tie_word_embeddings=family == "qwen3")  # Qwen2: untied, QKV bias; Qwen3: tied, QK-norm; Llama: untied
    config = config_cls(**{**shape, **moe, **config_args})
    model_cls(config).save_pretrained(path)
    return path


def make_chat_moe(out_dir: Path) -> Path:
    """`make_model`'s tiny Qwen3-MoE (4 experts, 2 per token) with the ChatML tokenizer of `make_tokenizer`."""
    tokenizer = make_tokenizer(out_dir)
    return make_model("qwen3_moe", out_dir, vocab_size=512, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id)


def launch_workdir(root: Path) -> Path:
    """`root` made a working directory that sees the repo's recipes and launchers (launch/tiny_cpu.sh's outputs stay
    in it)."""
    for name in ("recipes", "launch"):
        (root / name).symlink_to(REPO_ROOT / name)
    return root


def run_command(cmd: list[str], timeout: float, cwd: Path = REPO_ROOT, env: dict | None = None
                ) -> subprocess.CompletedProcess:
    """`subprocess.run(cmd, capture_output=True, text=True)` with the output in files, not pipes: a process the
    command leaves behind (a Ray daemon, a fork server) may hold a pipe open past the command's exit and stall its
    reader until pytest's timeout, with nothing to show. Past `timeout` the process tree is killed and the test fails
    with the output so far and every process's Python stacks (py-spy)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=ENV if env is None else env, stdout=out, stderr=err, text=True,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stacks = _python_stacks(proc.pid)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            out.seek(0), err.seek(0)
            raise AssertionError(f"{' '.join(map(str, cmd))} ran past {timeout} s\n--- stdout\n{out.read()[-3000:]}"
                                 f"\n--- stderr\n{err.read()[-5000:]}\n--- stacks\n{stacks}") from None
        out.seek(0), err.seek(0)
        return subprocess.CompletedProcess(cmd, proc.returncode, out.read(), err.read())


def worker_result(worker: Path, timeout: float = 300) -> dict:
    """A test's worker script run alone in a fresh interpreter: the JSON of its last output line."""
    done = run_command([sys.executable, str(worker)], timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _python_stacks(pid: int) -> str:
    import psutil

    root = psutil.Process(pid)
    dumps = []
    for process in [root, *root.children(recursive=True)]:
        try:
            dump = subprocess.run(["py-spy", "dump", "--pid", str(process.pid)], capture_output=True, text=True,
                                  timeout=30)
            command = " ".join(process.cmdline())[:200]
            dumps.append(f"== {process.pid} {command}\n{dump.stdout[-4000:]}{dump.stderr[-500:]}")
        except (OSError, subprocess.TimeoutExpired, psutil.Error) as e:
            dumps.append(f"== {process.pid}: no stacks ({e})")
    return "\n".join(dumps)


def run_one_rank(worker: Path, *args, out: Path, env: dict, timeout: int = 300) -> dict:
    """A worker script under torchrun on one rank (`worker *args out`), and the JSON it wrote to `out`."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", str(worker), *map(str, args),
           str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-6000:]
    return json.loads(out.read_text())


def run_layout(model_dir: Path, out: Path, tp: int, pp: int, cp: int, nproc: int, extra=(), timeout=300) -> dict:
    """tests/megarl/models/dist_worker.py's results for one parallel layout, under torchrun."""
    return run_layouts(DIST_WORKER, [(model_dir, out, (tp, pp, cp), list(extra))], nproc, timeout)[0]


def run_layouts(worker: Path, jobs: list, nproc: int, timeout=300) -> list[dict]:
    """A layout worker's results for each of `jobs` (model_dir, out, (tp, pp, cp), the worker's other arguments),
    one after another in one torchrun launch of `nproc` ranks (see dist_worker.py's `run_each_layout`)."""
    args = []
    for model_dir, out, (tp, pp, cp), extra in jobs:
        args += ["--and"] if args else []
        args += [str(model_dir), str(out), "--tp", str(tp), "--pp", str(pp), "--cp", str(cp), *map(str, extra)]
    from parallel.topology import free_port  # torchrun's default port may be another launch's on the machine

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-port",
           str(free_port()), str(worker), *args]
    proc = run_command(cmd, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return [json.loads(Path(out).read_text()) for _, out, _, _ in jobs]


def hide_ray() -> None:
    """Every `import ray` and `from ray.X import Y` fails from here on, as if Ray were not installed. A copy forked
    from tests/zygote/server.py has Ray's modules loaded already: `from ray.util import X` would find its module in
    sys.modules without looking at `ray`, so each of them is hidden, not only `ray`."""
    for name in [name for name in sys.modules if name == "ray" or name.startswith("ray.")] + ["ray"]:
        sys.modules[name] = None


def split_jobs(argv: list[str]) -> list[list[str]]:
    """A worker's command line of several jobs, `JOB_ARGS [--and JOB_ARGS ...]`, as each job's arguments."""
    jobs = [[]]
    for arg in argv:
        if arg == "--and":
            jobs.append([])
        else:
            jobs[-1].append(arg)
    return jobs


def run_jobs_in_turn(run_one: Callable[[list[str]], None], argv: list[str]) -> None:
    """`run_one` for each job of a torchrun worker's command line (`split_jobs`), each job joining a default process
    group of its own: torch's env:// rendezvous would give a second group the first one's gloo addresses (the same
    keys in the same store), so each job after the first meets on a store at a port rank 0 picks and posts in
    torchrun's agent store."""
    agent_port = int(os.environ["MASTER_PORT"])
    for index, job in enumerate(split_jobs(argv)):
        if index:
            import torch.distributed as dist

            agent = dist.TCPStore(os.environ["MASTER_ADDR"], agent_port, is_master=False,
                                  timeout=datetime.timedelta(seconds=120))
            key = f"tests.helpers/job-{index}/port"
            if os.environ["RANK"] == "0":
                from parallel.topology import free_port

                agent.set(key, str(free_port()))
            os.environ.update(MASTER_PORT=agent.get(key).decode(), TORCHELASTIC_USE_AGENT_STORE="False")
        run_one(job)


def run_job(model_dir, out, launcher, *extra, timeout=240):
    """tests/parallel/step_job.py under `launcher` (ray: 2 worker processes; torchrun: 2 ranks), and its time."""
    prefix = [sys.executable, "-m"]
    if launcher == "torchrun":
        prefix += ["torch.distributed.run", "--nproc-per-node", "2", "-m"]
    cmd = [*prefix, "tests.parallel.step_job", str(model_dir), str(out), *extra]
    start = time.monotonic()
    proc = run_command(cmd, timeout)
    return proc, time.monotonic() - start


def overrides(root, out, *extra):
    """`megarl train` overrides for the tiny model and prompts of tests/megarl/trainer/conftest.py's `setup`."""
    return [f"model.path={root / 'model'}", f"data.train_files=[{root / 'train.parquet'}]",
            f"trainer.output_dir={out}", "rollout.name=transformers", "rollout.n=2", "data.train_batch_size=2",
            "actor.ppo_mini_batch_size=1", "data.max_prompt_length=64", "data.max_response_length=6",
            "trainer.total_training_steps=2", "trainer.n_gpus_per_node=2", "trainer.collective_timeout_s=120",
            "actor.optim.lr=1e-3", "rollout.max_logprob_mult_error=1.001", *extra]


def read_metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def wait_for(done, proc: subprocess.Popen, log: Path, what: str, timeout_s: float = 300) -> None:
    """Until `done()`, while the run `proc` (its console in `log`) goes on."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert proc.poll() is None, f"the run ended before {what}:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"no {what} in {timeout_s} s:\n{log.read_text()[-4000:]}"
        time.sleep(0.2)


def wait_for_steps(proc: subprocess.Popen, metrics: Path, log: Path, steps: int = 2, timeout_s: float = 300) -> None:
    wait_for(lambda: metrics.is_file() and metrics.read_text().count("\n") >= steps, proc, log, f"{steps} steps",
             timeout_s)


def process_tree(pid: int) -> list:
    """The process `pid` and every process under it, and every other member of its process group (psutil
    Processes, which compare by pid and start time)."""
    import psutil

    root = psutil.Process(pid)
    tree = {root, *root.children(recursive=True)}
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == os.getpgid(pid):
                tree.add(process)
        except (ProcessLookupError, psutil.Error):
            pass
    return sorted(tree, key=lambda p: p.pid)


def left_running(processes: list, grace_s: float = 10.0) -> list[str]:
    """Those of `processes` still running (not zombies) after up to `grace_s` seconds, described."""
    import psutil

    def running(process) -> bool:
        try:
            return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    deadline = time.monotonic() + grace_s
    while any(map(running, processes)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [f"{p.pid} {' '.join(p.cmdline())[:150]}" for p in processes if running(p)]


CHROMIUM = shutil.which("chromium")  # Debian's headless browser, which .ci/run installs


def chromium(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    """Headless Chromium on `url` (scripts run up to 15 s of virtual time), e.g. with --dump-dom or --screenshot;
    the flags keep it off the network this machine does not have."""
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=15000", *args, url]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def gpu_machine() -> str:
    """The device tool's name for the lent machine this process runs on (for result rows)."""
    import torch

    count = torch.cuda.device_count()
    if "H100" in torch.cuda.get_device_name(0):
        return f"nvidia-h100-x{count}"
    return "nvidia-h200" if count == 1 else f"nvidia-h200-x{count}"


def record_gpu_row(file_name: str, row: dict, gpus_used: int = 1) -> None:
    """Append a GPU test's result row to $MEGARL_RESULTS_DIR/`file_name` (nothing without the variable), with the
    date, the commit ($MEGARL_COMMIT) and the machine."""
    out = os.environ.get("MEGARL_RESULTS_DIR")
    if not out:
        return
    row = {"date": datetime.date.today().isoformat(), "commit": os.environ.get("MEGARL_COMMIT", "unknown"),
           "machine": gpu_machine(), "gpus_used": gpus_used, **row}
    path = Path(out) / file_name
    rows = json.loads(path.read_text()) if path.exists() else []
    path.write_text(json.dumps(rows + [row], indent=1))


def responses_batch():
    """Two prompts (uids 10, 11) with two responses each, as `with_responses` lays them out."""
    from megarl.rollout.base import Response
    from megarl.rollout.batch import prompt_batch, with_responses

    prompts = prompt_batch({"prompt_ids": [[1, 2, 3], [4, 5]], "data_source": ["gsm8k", "math"]}, first_uid=10)
    responses = [[Response([7, 8], [-0.1, -0.2], "stop"), Response([9], [-0.3], "length")],
                 [Response([6, 6, 6], [-1.0, -1.0, -1.0], "length"), Response([5, 4], [-0.5, -0.4], "stop")]]
    return with_responses(prompts, responses)


WALL_CLOCK = ("timing_s/", "perf/", "memory/", "update_weights/stream_s")  # figures that differ from run to run
GRPO_TWO_STEPS = ["algorithm.adv_estimator=grpo", "trainer.total_training_steps=2"]
TWO_NODES = ["trainer.nnodes=2", "trainer.n_gpus_per_node=1"]  # one process on each of two nodes


def write_tiny_rl_setup(root: Path) -> Path:
    """The tiny chat model and GSM8K-format prompts that `overrides` points `megarl train` at."""
    import datasets

    make_chat_model(root / "model")
    rows = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"What is {a} + {b}? ####"}],
             "reward_model": {"ground_truth": str(a + b)}} for a, b in [(1, 2), (3, 4), (2, 2), (5, 1)]]
    datasets.Dataset.from_list(rows).to_parquet(str(root / "train.parquet"))
    return root


def run_metrics(out) -> list[dict]:
    """A run's metrics.jsonl without its wall-clock figures: equal for equal runs."""
    return [{k: v for k, v in row.items() if not k.startswith(WALL_CLOCK)} for row in read_metrics(out)]


def one_node_grpo_metrics(setup, out) -> list[dict]:
    """GRPO_TWO_STEPS on the tiny setup under torchrun, two processes on one node: what a multi-node run must equal."""
    from parallel.topology import free_port

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "-m", "megarl.train", *overrides(setup, out, *GRPO_TWO_STEPS)]
    proc = run_command(cmd, timeout=480)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert len(read_metrics(out)) == 2
    return run_metrics(out)
