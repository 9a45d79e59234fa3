"""A recipe's real RL step on random weights of a named shape (responses run to full length), phase by phase against
its FLOP floor at the GPU's dense bf16 peak; in the same run, its generation against standalone SGLang and its step
against a plain HF-transformers loop (benchmarks/hf_rl_loop.py) on the same prompts. Appends one row
(`what: rl-step`) to --out. With --profile-step k, step k also writes its traces (trainer.profile_steps) and is left
out of the medians.

    python benchmarks/rl_step.py --recipe recipes/qwen2_5_0_5b_ppo_gsm8k.yaml --shape qwen2.5-0.5b --steps 4 \\
        --data data/gsm8k --out $OUT/rl_step.json [--profile-step 3] [--set key=value ...]

The step runs under torchrun on the recipe's `trainer.n_gpus_per_node` GPUs (validation, checkpoints and sample logs
off). Each phase's floor counts the dense matmul and causal-attention FLOPs of its passes over the step's tokens
(forward 2·N per token, an update 6·N, 4·N for a LoRA actor; the critic's N has its value head where the actor's has
the vocabulary projection; megarl/trainer/perf.py), at the peak of every GPU of the run; `mfu` = floor / measured.
Medians are over the steps after the first (which compiles and warms up); --steps must leave at least one. The
GPU's data-sheet peak is not what its matmuls reach: in the same run, after the step, a bf16 GEMM probe measures that
(`matmul_peak_tflops`), and `mfu_vs_matmul_peak` is each phase's floor time at it over the measured time.
After the run has ended, on as many prompts of the same data, n samples each, to the same length: standalone SGLang
with the recipe's engine settings and memory share, and the HF-transformers loop with the actor's per-GPU token budget
(`vs_hf_transformers` = the step's tokens/s/GPU over the loop's). --no-baselines skips both, --no-hf-loop the loop.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from pathlib import Path

from recipe_process import finished_run, output_dir, run_logged

REPO = Path(__file__).resolve().parents[1]

# What the trimmed SGLang on the device needs (FA3 kernels are not carried); CUDA-graph batch sizes are left to SGLang,
# as a user leaves them: a cap below the concurrent responses would run the larger decode batches without graphs.
ENGINE = {"attention_backend": "triton", "sampling_backend": "pytorch"}
FORWARD_PHASES = {"old_log_prob": "actor", "ref": "actor", "values": "critic"}
UPDATE_PHASES = {"update_actor": "actor", "update_critic": "critic"}


def prepare(args, work: Path) -> tuple[Path, Path]:
    """The shape's random checkpoint (with --layers, a proxy of that many layers, drawn on a GPU where there is one)
    and the training parquet."""
    from megarl.models.init_model import write_model

    import torch

    layers = getattr(args, "layers", None)
    model = work / (f"{args.shape}-{layers}l" if layers else args.shape)
    if not (model / "config.json").exists():
        write_model(args.shape, model, dtype=torch.bfloat16, device="cuda" if torch.cuda.is_available() else "cpu",
                    **({"num_hidden_layers": layers} if layers else {}))
    return model, prepare_data(args.data, work)


def shape_name(args) -> str:
    """The row's `model_shape`: a layer proxy says so."""
    from megarl.models.shapes import SHAPES

    layers = getattr(args, "layers", None)
    full = SHAPES[args.shape]["num_hidden_layers"]
    return f"{args.shape} ({layers} of its {full} layers)" if layers else args.shape


def prepare_data(raw: Path, work: Path) -> Path:
    """GSM8K's training parquet under `work`, from its raw files at `raw` (once)."""
    from megarl.data.preprocess import preprocess

    if not (work / "gsm8k/train.parquet").exists():
        preprocess("gsm8k", str(raw), work / "gsm8k")
    return work / "gsm8k/train.parquet"


def overrides(args, model: Path, train: Path, out_dir: Path) -> list[str]:
    engine = [f"rollout.engine_kwargs.{k}={v}" for k, v in ENGINE.items()]
    profile = [f"trainer.profile_steps=[{args.profile_step}]"] if args.profile_step else []
    return [f"model.path={model}", f"data.train_files=[{train}]", "data.val_files=[]",
            f"trainer.total_training_steps={args.steps}", "trainer.save_freq=-1", "trainer.test_freq=-1",
            "trainer.val_before_train=false", "trainer.log_samples=0", f"trainer.output_dir={out_dir}", *engine,
            *profile, *args.set]


def run_steps(args, cfg, ov: list[str]) -> list[dict]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(cfg.trainer.n_gpus_per_node),
           "-m", "megarl.train", "--recipe", str(args.recipe), *ov]
    out_dir = output_dir(ov)
    return finished_run(*run_logged(cmd, out_dir, args.time_limit), out_dir)


def phase_floors(cfg, hf_config, steps: list[dict], peak: float) -> dict[str, dict]:
    """Per phase: the median time, its FLOP floor at `peak` × GPUs and their ratio."""
    from megarl.trainer.perf import training_flops

    tokens = statistics.median([s["perf/total_num_tokens"] for s in steps])
    sequences = cfg.data.train_batch_size * cfg.rollout.n
    lengths = [int(tokens / sequences)] * sequences
    full = training_flops(hf_config, lengths)
    lora = training_flops(hf_config, lengths, frozen_weights=True)
    critic = training_flops(hf_config, lengths, value_head=True)
    floors = {name: (critic if role == "critic" else full) / 3 for name, role in FORWARD_PHASES.items()}
    floors["update_actor"] = (lora if cfg.actor.lora.rank else full) * cfg.actor.ppo_epochs
    floors["update_critic"] = critic * cfg.critic.ppo_epochs
    out = {}
    for name, flops in floors.items():
        key = f"timing_s/{name}"
        if all(key in s for s in steps):
            seconds = statistics.median([s[key] for s in steps])
            floor = flops / (peak * cfg.world_size)
            out[name] = {"s": seconds, "floor_s": floor, "mfu": floor / seconds}
    for name in ("gen", "reward", "adv", "update_weights"):
        if all(f"timing_s/{name}" in s for s in steps):
            out[name] = {"s": statistics.median([s[f"timing_s/{name}"] for s in steps])}
    return out


def model_path(cfg) -> str:
    """Which layers the actor ran: Transformer Engine's or megatron-core's local ones (actor.megatron.transformer_impl)."""
    from megarl.models.accelerators import layers_name

    return layers_name(cfg.actor.megatron.transformer_impl)


def matmul_peak(sizes=(4096, 8192), flops_per_size: float = 2e13) -> float:
    """The bf16 FLOP/s this GPU's square matmuls reach (the best of `sizes`, each timed over about
    `flops_per_size` FLOPs after a warm-up): the hardware limit a dense phase can approach, measured."""
    import torch

    best = 0.0
    for n in sizes:
        a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        for _ in range(3):
            a @ b
        repeats = max(3, round(flops_per_size / (2 * n**3)))
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        torch.cuda.synchronize()
        best = max(best, 2 * n**3 * repeats / (time.perf_counter() - start))
        del a, b
    torch.cuda.empty_cache()
    return best


def with_matmul_peak(row: dict, datasheet: float, measured: float) -> None:
    """Both peaks (FLOP/s) into `row`, and its phases' MFU against the measured one besides the data sheet's."""
    row["peak_tflops"], row["matmul_peak_tflops"] = datasheet / 1e12, measured / 1e12
    row["mfu_vs_matmul_peak"] = {name: phase["floor_s"] * datasheet / measured / phase["s"]
                                 for name, phase in row["phases"].items() if "floor_s" in phase}


def prompt_ids(cfg, model: Path, train: Path, prompts: int) -> list[list[int]]:
    """The first `prompts` training prompts as the trainer reads them."""
    from transformers import AutoTokenizer

    from megarl.data.dataset import RLDataset

    dataset = RLDataset.from_config([str(train)], AutoTokenizer.from_pretrained(model), cfg.data)
    return [list(dataset[i]["prompt_ids"]) for i in range(prompts)]


def standalone_sglang(cfg, model: Path, prompts: list[list[int]], variants: dict | None = None) -> dict[str, dict]:
    """SGLang alone on one engine over the run's GPUs: rollout.n samples of each prompt to data.max_response_length
    tokens, in timed rounds of each variant (standalone.py; by default plain requests, and requests as the colocated
    step asks them: log-probs back, the prefix cache flushed before each round)."""
    from standalone import AS_COLOCATED, PLAIN, timed_rounds

    requests = [p for p in prompts for _ in range(cfg.rollout.n)]
    sampling = {"temperature": cfg.rollout.temperature, "max_new_tokens": cfg.data.max_response_length}
    variants = variants or {"standalone_sglang": PLAIN, "standalone_sglang_as_colocated": AS_COLOCATED}
    return timed_rounds(str(model), requests, sampling, cfg.rollout.tensor_model_parallel_size,
                        cfg.rollout.gpu_memory_utilization, ENGINE, variants)


def hf_transformers(cfg, model: Path, prompts: list[list[int]]) -> dict:
    from hf_rl_loop import hf_rl_step

    actor = cfg.actor
    budget = actor.ppo_max_token_len_per_gpu if actor.use_dynamic_bsz else (
        actor.ppo_micro_batch_size_per_gpu * (cfg.data.max_prompt_length + cfg.data.max_response_length))
    return hf_rl_step(model, prompts, cfg.rollout.n, cfg.data.max_response_length, cfg.rollout.temperature, budget)


def baselines(cfg, model: Path, train: Path, row: dict, hf_loop: bool = True) -> None:
    """Standalone SGLang (on a GPU) and the HF-transformers loop (unless not `hf_loop`), into `row` with the run's
    ratios to them."""
    import torch

    prompts = prompt_ids(cfg, model, train, cfg.data.train_batch_size)
    row["baseline"] = {}
    if torch.cuda.is_available():
        for name, variant in standalone_sglang(cfg, model, prompts).items():
            row["baseline"][name] = variant
            row[name.replace("standalone_sglang", "gen_vs_standalone")] = (row["gen_tokens_per_s"]
                                                                           / variant["gen_tokens_per_s"])
    if not hf_loop:
        return
    hf_row = row["baseline"]["hf_transformers"] = hf_transformers(cfg, model, prompts)
    row["vs_hf_transformers"] = row["tokens_per_s_per_gpu"] / hf_row["tokens_per_s_per_gpu"]


def summary(cfg, hf_config, metrics: list[dict], peak: float | None) -> dict:
    # After the first step (warm-up), and without a profiled one (the profiler slows it).
    steps = [m for m in metrics if m.get("step", 0) > 1 and m["step"] not in cfg.trainer.profile_steps]
    responses = (statistics.median([s["response_length/mean"] for s in steps])
                 * cfg.data.train_batch_size * cfg.rollout.n)
    gen_s = statistics.median([s["timing_s/gen"] for s in steps])
    phases = phase_floors(cfg, hf_config, steps, peak) if peak else {
        name: {"s": statistics.median([s[key] for s in steps])} for key in steps[0] if key.startswith("timing_s/")
        for name in [key.split("/", 1)[1]]}
    return {"steps_measured": len(steps), "step_s_median": statistics.median([s["timing_s/step"] for s in steps]),
            "per_step": per_step(steps, cfg.data.train_batch_size * cfg.rollout.n),
            "tokens_per_s_per_gpu": statistics.median([s["perf/throughput"] for s in steps]), "phases": phases,
            "mfu": {name: phase["mfu"] for name, phase in phases.items() if "mfu" in phase},
            "gen_tokens_per_s": responses / gen_s,
            "device_peak_gb": device_peaks(steps),
            "logprob_mult_error": [s.get("rollout/logprob_mult_error") for s in steps]}


def device_peaks(steps: list[dict]) -> dict[str, float]:
    """Each phase's device-wide GPU peak (GB, every process on the GPU, the engine included), the largest over the
    measured steps."""
    keys = [key for key in steps[0] if key.startswith("memory/") and key.endswith("/peak_gb") and "/host/" not in key]
    return {key.split("/")[1]: max(s[key] for s in steps if key in s) for key in keys}


def per_step(steps: list[dict], responses: int) -> dict[str, list[float]]:
    """Every measured step's phase times and generation speed (`responses` per step), in step order: the spread the
    medians hide."""
    keys = [key for key in steps[0] if key.startswith("timing_s/") and all(key in s for s in steps)]
    return {"step": [s["step"] for s in steps], "timing_s": {key.split("/", 1)[1]: [s[key] for s in steps]
                                                             for key in keys},
            "gen_tokens_per_s": [s["response_length/mean"] * responses / s["timing_s/gen"] for s in steps]}


def recipe_run_parser(doc: str, steps: int, work: str) -> argparse.ArgumentParser:
    """The options of a benchmark that runs a recipe's steps on random weights of a shape (this one, rollout_pool.py):
    the recipe, the shape, how many steps, more overrides, a work folder, GSM8K's raw files and the rows' file."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", type=Path, required=True)
    parser.add_argument("--shape", required=True, help="a megarl.models.shapes.SHAPES name (random weights)")
    parser.add_argument("--layers", type=int, help="a proxy of the shape with this many layers (the row says so)")
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--set", nargs="*", default=[], help="more recipe overrides")
    parser.add_argument("--work", type=Path, default=Path(work))
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared/data/gsm8k")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--time-limit", type=float, help="stop a run after this many seconds (an error)")
    return parser


def main() -> int:
    parser = recipe_run_parser(__doc__, steps=4, work="/tmp/rl_step")
    parser.add_argument("--profile-step", type=int, default=None,
                        help="write that step's traces (trainer.profile_steps)")
    parser.add_argument("--no-baselines", action="store_true", help="skip standalone SGLang and the HF loop")
    parser.add_argument("--no-hf-loop", action="store_true", help="skip the HF loop (minutes at 0.6B), keep SGLang")
    args = parser.parse_args()

    import torch

    from rl_memory import append_row
    from megarl.config import load_config
    from megarl.models.bridge import load_hf_config
    from megarl.trainer.perf import peak_flops

    args.work.mkdir(parents=True, exist_ok=True)
    model, train = prepare(args, args.work)
    ov = overrides(args, model, train, args.work / f"run-{int(time.time())}")
    cfg = load_config(args.recipe, ov)
    metrics = run_steps(args, cfg, ov)
    cuda = torch.cuda.is_available()
    peak = peak_flops(torch.cuda.get_device_name()) if cuda else None
    row = {"date": datetime.date.today().isoformat(), "commit": os.environ.get("MEGARL_COMMIT", "unknown"),
           "machine": os.environ.get("MEGARL_MACHINE", "unknown"), "what": "rl-step", "recipe": str(args.recipe),
           "command": "python benchmarks/rl_step.py " + " ".join(sys.argv[1:]), "model_shape": shape_name(args),
           "dtype": "bf16" if cuda else "fp32", "gpus_used": cfg.world_size, "backend": cfg.rollout.name,
           "batch": cfg.data.train_batch_size, "n": cfg.rollout.n, "response_len": cfg.data.max_response_length,
           "model_path": model_path(cfg), **summary(cfg, load_hf_config(model), metrics, peak)}
    if peak:
        with_matmul_peak(row, peak, matmul_peak())
    if not args.no_baselines:
        baselines(cfg, model, train, row, hf_loop=not args.no_hf_loop)
    return append_row(args.out, row, 0, "")


if __name__ == "__main__":
    sys.exit(main())
