"""The RL step a user without an RL stack writes with HF transformers: `generate` n samples per prompt to full length,
then one forward/backward of a policy-gradient loss over every sequence and an AdamW step. benchmarks/rl_step.py runs
it on the recipe's prompts as a reference row for its step.

`generate` takes at most `GENERATE_SEQUENCES` sequences a call (a whole batch of a two-GPU recipe, 1,024 sequences of
1,536 tokens, would need 180 GB of KV cache at 0.6B). Micro-batches hold as many padded sequences as the recipe's
per-GPU token budget allows. The advantages are random signs: what is timed is the work, not what it learns."""

from __future__ import annotations

import time

import torch

GENERATE_SEQUENCES = 256


def _timed(fn):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return result, time.perf_counter() - start


def _left_padded(prompts: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    return ids.to(device), mask.to(device)


def _generate(model, prompts, n: int, max_new_tokens: int, temperature: float, pad_id: int):
    ids, mask = _left_padded([p for p in prompts for _ in range(n)], pad_id, model.device)
    # min_new_tokens runs every response to full length, as random weights do in the RL step.
    sequences = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=temperature,
                               max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, pad_token_id=pad_id)
    full_mask = torch.cat([mask, torch.ones_like(sequences[:, ids.shape[1]:])], dim=1)
    return sequences, full_mask, ids.shape[1]


def _policy_gradient_pass(model, optimizer, generated: list[tuple], token_budget: int) -> None:
    """One optimizer step over every generated (sequences, mask, prompt width) group, in micro-batches."""
    response_tokens = sum((sequences.shape[1] - width) * sequences.shape[0] for sequences, _, width in generated)
    for sequences, mask, width in generated:
        per_micro = max(1, token_budget // sequences.shape[1])
        advantages = torch.randint(0, 2, (sequences.shape[0],), device=sequences.device).float() * 2 - 1
        for start in range(0, sequences.shape[0], per_micro):
            ids, micro_mask = sequences[start:start + per_micro], mask[start:start + per_micro]
            logits = model(input_ids=ids, attention_mask=micro_mask).logits[:, width - 1:-1]
            logprobs = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, width:, None]).squeeze(-1)
            loss = -(logprobs * advantages[start:start + per_micro, None]).sum() / response_tokens
            loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def hf_rl_step(model_path, prompts: list[list[int]], n: int, max_new_tokens: int, temperature: float,
               token_budget: int) -> dict:
    """One warm-up step on the first prompt, then one timed step on all of them: its seconds (generation and the
    training pass apart) and prompt-plus-response tokens per second."""
    from transformers import AutoModelForCausalLM

    cuda = torch.cuda.is_available()
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.bfloat16 if cuda else torch.float32,
                                                 attn_implementation="sdpa").to("cuda" if cuda else "cpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=cuda)
    pad_id = model.generation_config.pad_token_id or model.config.eos_token_id or 0
    if isinstance(pad_id, list):
        pad_id = pad_id[0]
    per_call = max(1, GENERATE_SEQUENCES // n)
    for batch, length in ((prompts[:1], 4), (prompts, max_new_tokens)):
        groups = [batch[i:i + per_call] for i in range(0, len(batch), per_call)]
        generated, gen_s = _timed(lambda: [_generate(model, g, n, length, temperature, pad_id) for g in groups])
        _, train_s = _timed(lambda: _policy_gradient_pass(model, optimizer, generated, token_budget))
    tokens = sum(int(mask.sum()) for _, mask, _ in generated)
    return {"backend": "hf-transformers generate + sdpa fwd/bwd + AdamW", "step_s": gen_s + train_s, "gen_s": gen_s,
            "train_s": train_s, "tokens": tokens, "tokens_per_s_per_gpu": tokens / (gen_s + train_s),
            "generate_calls": len(generated)}
