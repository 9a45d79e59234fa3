"""`megarl init-model --shape NAME --out DIR`: a HF checkpoint of one of the recipes' model shapes with random
weights and a tokenizer built here, so that every recipe runs without downloading anything.

The `tiny` shape gets a tokenizer made for a bundled task (arithmetic, or the tools recipe's products) and bare
prompts; the real shapes get a small byte-level BPE vocabulary with Qwen's ChatML template (token ids stay far below their vocab_size).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

import torch

from megarl.data import arithmetic, products
from megarl.models.shapes import SHAPES, hf_config
from megarl.models.tokenizer import CHATML_TEMPLATE, DEFAULT_CORPUS, PLAIN_TEMPLATE, build_tokenizer
from megarl.process_exit import exit_process


TINY_TASKS = ("arithmetic", "products")  # the bundled tasks a tiny model's tokenizer is made for


def write_model(shape: str, out: str | Path, seed: int = 0, dtype: torch.dtype = torch.float32,
                device: str = "cpu", task: str = "arithmetic", **overrides) -> Path:
    """Tokenizer first, so the config names its EOS and padding ids; then random weights drawn from `seed` on
    `device` (a GPU draws an 8B model's in seconds where the CPU takes minutes; the draws differ by device).
    `task`: the bundled task whose texts the tiny shape's tokenizer is made from."""
    from transformers import AutoModelForCausalLM

    out = Path(out)
    if shape == "tiny" and task == "products":
        tokenizer = build_tokenizer(out, products.corpus(), vocab_size=SHAPES["tiny"]["vocab_size"],
                                    chat_template=products.CHAT_TEMPLATE, special_tokens=products.SPECIAL_TOKENS)
    elif shape == "tiny":
        tokenizer = build_tokenizer(out, arithmetic.corpus(), vocab_size=SHAPES["tiny"]["vocab_size"],
                                    chat_template=PLAIN_TEMPLATE)
    else:
        tokenizer = build_tokenizer(out, DEFAULT_CORPUS, vocab_size=400, chat_template=CHATML_TEMPLATE)
    config = hf_config(shape, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                       bos_token_id=None, **overrides)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.save_pretrained(out)
    return out


def tiny_moe(experts: int) -> dict:
    """The tiny shape's config values that make it a Qwen3-MoE: every layer's MLP `experts` experts of the dense
    MLP's width, 2 routed per token."""
    return dict(model_type="qwen3_moe", num_experts=experts, num_experts_per_tok=2,
                moe_intermediate_size=SHAPES["tiny"]["intermediate_size"], norm_topk_prob=True, mlp_only_layers=[],
                decoder_sparse_step=1, tie_word_embeddings=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="megarl init-model", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", required=True, choices=sorted(SHAPES))
    parser.add_argument("--out", required=True, help="the checkpoint directory to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--layers", type=int, help="fewer layers than the shape has (quick tests)")
    parser.add_argument("--device", default="cpu", help="where the weights are drawn, e.g. cuda (much faster)")
    parser.add_argument("--task", choices=TINY_TASKS, default="arithmetic",
                        help="the bundled task the tiny shape's tokenizer is made for (products: the tools recipe)")
    parser.add_argument("--experts", type=int, default=0,
                        help="the tiny shape as a Qwen3-MoE of this many experts (2 routed per token)")
    args = parser.parse_args(argv)
    if args.task != "arithmetic" and args.shape != "tiny":
        parser.error("--task chooses the tiny shape's tokenizer; the other shapes have one of their own")
    if args.experts and (args.shape != "tiny" or args.experts < 2):
        parser.error("--experts makes the tiny shape a mixture of experts: --shape tiny and at least 2 experts")
    overrides = {"num_hidden_layers": args.layers} if args.layers else {}
    if args.experts:
        overrides.update(tiny_moe(args.experts))
    out = write_model(args.shape, args.out, args.seed, getattr(torch, args.dtype), args.device, args.task,
                      **overrides)
    print(f"wrote a random-weight {args.shape} checkpoint to {out}")
    return 0


if __name__ == "__main__":
    exit_process(main())
