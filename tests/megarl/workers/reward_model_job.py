"""The reward-model role's scores against HF transformers' sequence-classification model on the same checkpoint, run
under torchrun by test_reward_model.py (CPU, fp32).

usage: torchrun --nproc-per-node N reward_model_job.py MODEL_DIR OUT_JSON --tp T
Rank 0 writes the scores of fixed sequences and their max |Δ| against HF's logits.
"""

import argparse
import json

import torch
from transformers import AutoModelForSequenceClassification

from megarl.config.schema import MegatronConfig
from megarl.models.roles import build_reward_model
from megarl.process_exit import exit_process
from parallel import cpu_compat, topology

LENGTHS = (9, 14, 6, 11)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("out")
    parser.add_argument("--tp", type=int, default=1)
    args = parser.parse_args()
    cpu_compat.enable()  # a CPU test: megatron through the CPU shim
    topology.init_distributed()
    topology.init_model_parallel(args.tp)
    model = build_reward_model(args.model_dir, MegatronConfig(tensor_model_parallel_size=args.tp))
    hf = AutoModelForSequenceClassification.from_pretrained(args.model_dir, torch_dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(7)
    seqs = [torch.randint(0, hf.config.vocab_size, (n,), generator=generator) for n in LENGTHS]
    for s in seqs:  # HF scores the last token that is not padding
        s[s == hf.config.pad_token_id] = (hf.config.pad_token_id + 1) % hf.config.vocab_size
    scores = model.sequence_scores(seqs, [[0, 1], [2, 3]])
    with torch.no_grad():
        reference = torch.stack([hf(input_ids=s[None]).logits[0, 0] for s in seqs])
    # Colocated, its weights leave the GPU after each pass; in a pool of its own (resident) they stay.
    resident = build_reward_model(args.model_dir, MegatronConfig(tensor_model_parallel_size=args.tp), resident=True)
    resident_scores = resident.sequence_scores(seqs, [[0, 1], [2, 3]])
    if torch.distributed.get_rank() == 0:
        with open(args.out, "w") as f:
            json.dump({"scores": scores.tolist(), "max_abs_diff": (scores - reference).abs().max().item(),
                       "resident_max_abs_diff": (resident_scores - reference).abs().max().item(),
                       "params_on_device": {"colocated": model.state.params_on_device,
                                            "resident": resident.state.params_on_device}}, f)


if __name__ == "__main__":
    exit_process(main())
