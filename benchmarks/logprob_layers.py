"""Where the trainer's and the rollout engine's log-probs part: megatron as megarl runs it (bf16, the reference
role's packed forward), SGLang (its prefill, layer by layer through its tensor dump, and the decode that sampled the
responses) and HF transformers in bf16, each compared layer by layer with an fp32 reference (HF transformers in
float32, TF32 off) on the same bf16 weights and the same sequences. Appends one row (`what: logprob-layers`) to --out
and prints the table.

    python benchmarks/logprob_layers.py --shape qwen3-8b --layers 12 --out $OUT/logprob_layers.json

Per layer: the relative error ‖x − ref‖/‖ref‖ (over every token of every sequence) of the attention block's output,
the MLP's output and the residual stream after the layer; then of the final norm's output; then the log-prob error
on the response tokens, as `rollout/logprob_mult_error` measures it (mean exp|Δ log p|), against the reference and
between megatron and SGLang. `megatron-fp32-logits` is megatron's own final hidden states through the output layer in
fp32: how much of its error is the bf16 logits. `--impls` leaves implementations out (SGLang needs a GPU).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

IMPLS = ("megatron", "sglang", "hf-bf16")
ENGINE = {"attention_backend": "triton", "sampling_backend": "pytorch"}


class Capture:
    """One implementation's tensors on the host, per layer, over all sequences' tokens in one order."""

    def __init__(self, layers: int):
        self.attn, self.mlp, self.residual = ([None] * layers for _ in range(3))
        self.final = None
        self.logprobs: list[torch.Tensor] = []  # per sequence: log p(token t+1 | ≤ t), [L−1]


def write_checkpoint(shape: str, layers: int | None, out: Path, device: str) -> Path:
    from megarl.models.init_model import write_model

    overrides = {"num_hidden_layers": layers} if layers else {}
    write_model(shape, out, dtype=torch.bfloat16, device=device, **overrides)  # bf16: every side uses the same weights
    gc.collect()
    return out


def _first(output):
    return output[0] if isinstance(output, (tuple, list)) else output


def _hooks(named: dict, store: dict[str, list]):
    """Forward hooks appending each module's (first) output, detached to the host in fp32, to store[name]."""
    def hook(name):
        return lambda module, args, output: store.setdefault(name, []).append(_first(output).detach().float().cpu())
    return [module.register_forward_hook(hook(name)) for name, module in named.items()]


def _concat(parts: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([p.reshape(-1, p.shape[-1]) for p in parts])


@contextmanager
def _recording(final, per_layer: list[tuple]) -> Iterator[Capture]:
    """Records, while the block runs, the output of `final` (the final norm) and of each layer's (attention output,
    MLP output, layer) modules; the yielded Capture holds them when the block ends (its log-probs are the caller's)."""
    modules = {"final": final}
    for i, (attn, mlp, layer) in enumerate(per_layer):
        modules.update({f"attn{i}": attn, f"mlp{i}": mlp, f"residual{i}": layer})
    store: dict[str, list] = {}
    handles = _hooks(modules, store)
    capture = Capture(len(per_layer))
    try:
        yield capture
    finally:
        for handle in handles:
            handle.remove()
    for i in range(len(per_layer)):
        capture.attn[i], capture.mlp[i], capture.residual[i] = (
            _concat(store[f"{kind}{i}"]) for kind in ("attn", "mlp", "residual"))
    capture.final = _concat(store["final"])


def _next_token_logprobs(logits: torch.Tensor, seq: torch.Tensor) -> torch.Tensor:
    """[L−1] log p(token t+1 | ≤ t) from the logits at positions 0..L−2, log-softmax in fp32, on the host."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, seq[1:].to(logits.device).unsqueeze(-1)).squeeze(-1).cpu()


def capture_megatron(model_dir: Path, sequences: list[torch.Tensor]) -> dict[str, Capture]:
    """megarl's reference role (the forward `old_log_prob` and `ref` run): all sequences packed in one micro-batch."""
    from megatron.core.utils import unwrap_model

    from megarl.config.schema import MegatronConfig
    from megarl.models.roles import build_reference
    from parallel import cpu_compat, topology

    cpu_compat.enable()  # where this machine has no GPU, megatron runs through the CPU shim
    topology.init_distributed()
    topology.init_model_parallel()
    reference = build_reference(model_dir, MegatronConfig(), bf16=True)
    gpt = unwrap_model(reference.chunks[0])
    per_layer = [(layer.self_attention, layer.mlp, layer) for layer in gpt.decoder.layers]
    with _recording(gpt.decoder.final_layernorm, per_layer) as capture:
        result = reference.logprobs(sequences, [list(range(len(sequences)))])
    capture.logprobs = [lp.float().cpu() for lp in result["logprobs"]]
    with reference.weights_in_use():
        tied = gpt.share_embeddings_and_output_weights
        weight = (gpt.shared_embedding_or_output_weight() if tied else gpt.output_layer.weight).detach().float()
        fp32_logits = Capture(0)
        fp32_logits.logprobs = _logprobs_from_hidden(capture.final, weight, sequences)
    del reference, gpt, weight
    gc.collect()
    return {"megatron": capture, "megatron-fp32-logits": fp32_logits}


def _logprobs_from_hidden(final: torch.Tensor, weight: torch.Tensor, sequences) -> list[torch.Tensor]:
    """The final norm's output (fp32 on the host, rounded as the model produced it) through `weight` in fp32."""
    out, start = [], 0
    for seq in sequences:
        hidden = final[start:start + len(seq)].to(weight.device)
        start += len(seq)
        out.append(_next_token_logprobs(hidden[:-1] @ weight.T, seq))
    return out


def capture_hf(model_dir: Path, sequences: list[torch.Tensor], dtype: torch.dtype, device: str) -> Capture:
    """HF transformers, one sequence at a time (no padding), logits and log-softmax in fp32."""
    from transformers import AutoModelForCausalLM

    torch.set_float32_matmul_precision("highest")  # the reference: no TF32
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa").to(device)
    model.eval()
    per_layer = [(layer.self_attn.o_proj, layer.mlp.down_proj, layer) for layer in model.model.layers]
    with _recording(model.model.norm, per_layer) as capture, torch.no_grad():
        for seq in sequences:
            capture.logprobs.append(_next_token_logprobs(model(seq.unsqueeze(0).to(device)).logits[0, :-1], seq))
    del model
    gc.collect()
    torch.cuda.empty_cache()
    return capture


def capture_sglang(model_dir: Path, prompts: list[list[int]], response_len: int, layers: int,
                   work: Path) -> tuple[list[torch.Tensor], list[torch.Tensor], Capture]:
    """SGLang samples the responses (their decode log-probs are the rollout's), then prefills the whole sequences
    once more with its tensor dump on: the per-layer outputs and the prompt log-probs of that pass."""
    import sglang

    dump = work / "sglang-dump"
    total = len(prompts) * (len(prompts[0]) + response_len)
    engine = sglang.Engine(model_path=str(model_dir), dtype="bfloat16", mem_fraction_static=0.35,
                           skip_tokenizer_init=True, disable_radix_cache=True, random_seed=0, log_level="error",
                           chunked_prefill_size=max(8192, total), max_prefill_tokens=max(16384, total),
                           debug_tensor_dump_output_folder=str(dump), **ENGINE)
    try:
        outputs = engine.generate(input_ids=prompts, return_logprob=True, sampling_params={
            "temperature": 1.0, "max_new_tokens": response_len, "ignore_eos": True})
        responses = [[token for _, token, _ in out["meta_info"]["output_token_logprobs"]] for out in outputs]
        decode = [torch.tensor([lp for lp, _, _ in out["meta_info"]["output_token_logprobs"]]) for out in outputs]
        sequences = [torch.tensor(p + r) for p, r in zip(prompts, responses)]
        for old in dump.rglob("Pass*.pt"):  # the decode steps'
            old.unlink()
        outputs = engine.generate(input_ids=[s.tolist() for s in sequences], return_logprob=True, logprob_start_len=0,
                                  sampling_params={"temperature": 0.0, "max_new_tokens": 1})
    finally:
        engine.shutdown()
    capture = _read_dump(sorted(dump.rglob("Pass*.pt")), sequences, layers)
    capture.logprobs = [torch.tensor([lp for lp, _, _ in out["meta_info"]["input_token_logprobs"][1:]])
                        for out in outputs]
    return sequences, decode, capture


def _read_dump(files: list[Path], sequences: list[torch.Tensor], layers: int) -> Capture:
    """The prefill pass(es) of SGLang's tensor dump, cut into sequences (matched by their tokens) and put in
    `sequences`' order. SGLang adds the residual inside the next layer's input norm: its outputs are (normed,
    residual), so the stream after layer i is layer i+1's input norm's second output (the final norm's for the last)."""
    index = {tuple(s.tolist()): i for i, s in enumerate(sequences)}
    per_seq: list[dict | None] = [None] * len(sequences)
    for file in files:
        dumped = torch.load(file)
        ids, lens = dumped["model.forward_batch_info.input_ids"], dumped["model.forward_batch_info.seq_lens"]
        if ids.numel() == lens.numel():  # a decode step (the overlap scheduler may run one past a request's end)
            continue
        if int(lens.sum()) != ids.numel():
            raise RuntimeError(f"{file}: a partial prefill ({ids.numel()} tokens of sequences {lens.tolist()}: "
                               "chunked or cached); the comparison needs whole sequences")
        start = 0
        for length in lens.tolist():
            rows = slice(start, start + length)
            per_seq[index[tuple(ids[rows].tolist())]] = {
                name: [t[rows] for t in value] if isinstance(value, list) else value[rows]
                for name, value in dumped.items() if not name.startswith("model.forward_batch_info")}
            start += length
    if any(s is None for s in per_seq):
        raise RuntimeError("SGLang's dump does not hold every sequence's prefill")

    def stacked(name, part=None):
        values = [s[name] if part is None else s[name][part] for s in per_seq]
        return torch.cat(values).float()

    capture = Capture(layers)
    prefix = "model.layers"
    for i in range(layers):
        capture.attn[i] = stacked(f"{prefix}.{i}.self_attn.o_proj")
        capture.mlp[i] = stacked(f"{prefix}.{i}.mlp.down_proj")
        after = f"{prefix}.{i + 1}.input_layernorm" if i + 1 < layers else "model.norm"
        if isinstance(per_seq[0].get(after), list):
            capture.residual[i] = stacked(after, 1)
    final = per_seq[0]["model.norm"]
    capture.final = stacked("model.norm", 0 if isinstance(final, list) else None)
    return capture


def relative_error(x: torch.Tensor | None, ref: torch.Tensor) -> float | None:
    return None if x is None else round(((x - ref).norm() / ref.norm()).item(), 5)


def logprob_error(a: list[torch.Tensor], b: list[torch.Tensor], response_len: int) -> dict[str, float]:
    """mean exp|Δ log p| and max |Δ| over the response tokens: each sequence's last `response_len` log-probs (a
    whole sequence's or only its response's)."""
    diffs = torch.cat([(x[-response_len:] - y[-response_len:]).abs() for x, y in zip(a, b)])
    return {"mult_error": round(diffs.exp().mean().item(), 5), "max_abs_diff": round(diffs.max().item(), 5)}


def compare(ref: Capture, captures: dict[str, Capture], decode: list[torch.Tensor] | None,
            response_len: int) -> dict:
    layered = {name: c for name, c in captures.items() if c.final is not None}
    table = {name: [{"layer": i, **{kind: relative_error(getattr(c, kind)[i], getattr(ref, kind)[i])
                                    for kind in ("attn", "mlp", "residual")}}
                    for i in range(len(ref.attn))] for name, c in layered.items()}
    result = {
        "layers_rel_err": table,
        "final_norm_rel_err": {name: relative_error(c.final, ref.final) for name, c in layered.items()},
        "logprob_vs_fp32": {name: logprob_error(c.logprobs, ref.logprobs, response_len) for name, c in captures.items()},
    }
    if decode is not None:
        result["logprob_vs_fp32"]["sglang-decode"] = logprob_error(decode, ref.logprobs, response_len)
        result["megatron_vs_sglang_decode"] = logprob_error(captures["megatron"].logprobs, decode, response_len)
        result["megatron_vs_sglang_prefill"] = logprob_error(captures["megatron"].logprobs,
                                                             captures["sglang"].logprobs, response_len)
    return result


def print_table(result: dict) -> None:
    names = list(result["layers_rel_err"])
    print("| layer | " + " | ".join(f"{n} attn | {n} mlp | {n} residual" for n in names) + " |")
    print("|---" * (1 + 3 * len(names)) + "|")
    for i in range(len(next(iter(result["layers_rel_err"].values())))):
        cells = [result["layers_rel_err"][n][i] for n in names]
        print(f"| {i} | " + " | ".join(f"{c['attn']} | {c['mlp']} | {c['residual']}" for c in cells) + " |")
    print("final norm:", result["final_norm_rel_err"])
    for key in ("logprob_vs_fp32", "megatron_vs_sglang_decode", "megatron_vs_sglang_prefill"):
        if key in result:
            print(f"{key}: {result[key]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="qwen3-8b")
    parser.add_argument("--layers", type=int, help="fewer layers than the shape has")
    parser.add_argument("--model", type=Path, help="an existing bf16 HF checkpoint instead of a random --shape")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--response-len", type=int, default=256)
    parser.add_argument("--impls", default=",".join(IMPLS), help=f"a subset of {','.join(IMPLS)}")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    impls = args.impls.split(",")
    if unknown := set(impls) - set(IMPLS):
        parser.error(f"--impls: unknown {sorted(unknown)}; choose from {', '.join(IMPLS)}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    work = Path(tempfile.mkdtemp(prefix="logprob-layers-"))
    model_dir = args.model or write_checkpoint(args.shape, args.layers, work / "model", device)
    config = json.loads((model_dir / "config.json").read_text())
    layers = config["num_hidden_layers"]
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, config["vocab_size"], (args.prompt_len,), generator=generator).tolist()
               for _ in range(args.prompts)]
    captures, decode = {}, None
    if "sglang" in impls:
        sequences, decode, captures["sglang"] = capture_sglang(model_dir, prompts, args.response_len, layers, work)
    else:  # no engine to sample from: random responses
        sequences = [torch.tensor(p) for p in prompts]
        sequences = [torch.cat([s, torch.randint(0, config["vocab_size"], (args.response_len,), generator=generator)])
                     for s in sequences]
    if "megatron" in impls:
        captures.update(capture_megatron(model_dir, sequences))
    if "hf-bf16" in impls:
        captures["hf-bf16"] = capture_hf(model_dir, sequences, torch.bfloat16, device)
    reference = capture_hf(model_dir, sequences, torch.float32, device)
    result = compare(reference, captures, decode, args.response_len)
    print_table(result)
    row = {"date": datetime.date.today().isoformat(), "commit": os.environ.get("MEGARL_COMMIT", _commit()),
           "machine": os.environ.get("MEGARL_MACHINE", "unknown"), "what": "logprob-layers",
           "command": "python benchmarks/logprob_layers.py " + " ".join(sys.argv[1:]),
           "model_shape": args.model.name if args.model else args.shape, "layers": layers, "dtype": "bf16",
           "reference": "HF transformers float32 (TF32 off) on the same bf16 weights", "tp": 1, "rollout_tp": 1,
           "prompts": args.prompts, "prompt_len": args.prompt_len, "response_len": args.response_len,
           "engine_kwargs": ENGINE if "sglang" in impls else None, **result}
    rows = json.loads(args.out.read_text()) if args.out.exists() else []
    args.out.write_text(json.dumps(rows + [row], indent=1))


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                          text=True).stdout.strip() or "unknown"


if __name__ == "__main__":
    main()
