"""`megarl rm` end to end on CPU under torchrun (2 gloo processes), on a tiny Qwen2 chat model and a learnable toy
preference: `#### N` beats `= N`, which beats a bare `N`, whatever the numbers (rankings of 3 and of 2 responses,
and preference pairs).

With data parallelism (rankings and preference pairs from two files) the reward model learns the preference and
holds it on held-out rankings; the HF sequence classifier it writes scores as the megatron model does (its logged
validation loss, and `build_critic` + `sequence_scores` on the written checkpoint). With context parallelism (each
sequence's last token on one CP rank) the first step's loss and accuracy are those transformers computes for the
starting weights."""

import json
import random
import sys

import datasets
import pytest
import torch

from megarl.algorithms import ranking_terms
from megarl.data.dataset import encode_prompt
from tests.helpers import make_chat_model, run_command

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "megarl.rm"]


def chat(a, b):
    return [{"role": "user", "content": f"What is {a} + {b}?"}]


def rankings(seed, count, sizes=(3,)):
    """`count` prompts, each with its ranking best first: `#### N`, `= N`, `N` (N the sum or near it), cut to
    `sizes` responses in turn."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        a, b = rng.randrange(20), rng.randrange(20)
        n = a + b + rng.choice([0, 0, 1, -1])
        responses = [f"#### {n}", f"= {n}", f"{n}"][: sizes[index % len(sizes)]]
        rows.append({"prompt": chat(a, b), "responses": responses})
    return rows


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("rm")
    make_chat_model(root / "model")
    pairs = [{"prompt": row["prompt"], "chosen": row["responses"][0], "rejected": row["responses"][rng]}
             for rng, row in zip([1, 2] * 12, rankings(1, 24))]
    datasets.Dataset.from_list(pairs).to_parquet(str(root / "pairs.parquet"))
    datasets.Dataset.from_list(rankings(2, 24, sizes=(3, 3, 2))).to_parquet(str(root / "rankings.parquet"))
    datasets.Dataset.from_list(rankings(3, 16, sizes=(3, 2))).to_parquet(str(root / "val.parquet"))
    return root


def run_rm(root, out, model, train_files, *extra):
    cmd = [*TORCHRUN, f"model.path={model}", f"data.train_files={train_files}",
           f"data.val_files=[{root / 'val.parquet'}]", f"trainer.output_dir={out}", "data.max_length=64",
           "trainer.n_gpus_per_node=2", "trainer.collective_timeout_s=120", *extra]
    proc = run_command(cmd, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    assert f"reward model written to {out / 'hf'}" in proc.stdout
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def encoded(tokenizer, row):
    prompt = encode_prompt(tokenizer, row["prompt"], "")
    return [torch.tensor(prompt + tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
            for text in row["responses"]]


def hf_classifier(model_dir):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(model_dir, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(model_dir)


def hf_scores(model, tokenizer, rows):
    """Each row's response scores under the HF sequence classifier `model`."""
    return [torch.stack([model(ids[None]).logits[0, 0] for ids in encoded(tokenizer, row)]) for row in rows]


def hf_metrics(model_dir, rows):
    """The rankings' mean loss, mean accuracy and the loss's gradient norm under the HF model at `model_dir`."""
    model, tokenizer = hf_classifier(model_dir)
    scores = hf_scores(model, tokenizer, rows)
    terms = ranking_terms(torch.cat(scores), [len(s) for s in scores])
    terms.loss.mean().backward()
    grad_norm = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).norm()
    return terms.loss.mean().item(), terms.accuracy.mean().item(), grad_norm.item()


# The megatron side of the written checkpoint: a critic built from it (its head read from score.weight).
MEGATRON_SCORES = """
import json, sys, torch
from megarl.config.schema import MegatronConfig, OptimConfig
from megarl.models.roles import build_critic
from parallel import cpu_compat, topology
cpu_compat.enable()
topology.init_distributed()
topology.init_model_parallel()
critic = build_critic(sys.argv[1], MegatronConfig(), OptimConfig(), total_steps=1, seed=123)
sequences = [torch.tensor(ids) for ids in json.loads(sys.argv[2])]
print(json.dumps(critic.sequence_scores(sequences, [list(range(len(sequences)))]).tolist()))
"""


def megatron_scores(model_dir, sequences):
    proc = run_command([sys.executable, "-c", MEGATRON_SCORES, str(model_dir),
                        json.dumps([s.tolist() for s in sequences])], timeout=120)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return torch.tensor(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_the_reward_model_learns_the_preference_and_exports_a_hf_classifier(setup, tmp_path):
    out = tmp_path / "run"
    steps = run_rm(setup, out, setup / "model", f"[{setup / 'pairs.parquet'},{setup / 'rankings.parquet'}]",
                   "data.train_batch_size=8", "data.micro_batch_size_per_gpu=2", "trainer.total_epochs=4",
                   "optim.lr=1e-3", "optim.lr_decay_style=constant", "optim.weight_decay=0", "trainer.test_freq=8")
    assert [s["step"] for s in steps] == list(range(1, 25))
    assert {"rm/loss", "rm/accuracy", "rm/chosen_reward", "rm/rejected_reward", "rm/grad_norm", "rm/lr",
            "train/epoch"} <= steps[0].keys()
    assert [s["step"] for s in steps if "val/rm/loss" in s] == [8, 16, 24]
    assert sum(s["rm/loss"] for s in steps[-6:]) < 0.3 * sum(s["rm/loss"] for s in steps[:6])
    assert min(s["rm/accuracy"] for s in steps[-6:]) >= 0.9 and steps[-1]["val/rm/accuracy"] >= 0.9
    assert steps[-1]["rm/chosen_reward"] > steps[-1]["rm/rejected_reward"]

    hf_dir = out / "hf"
    config = json.loads((hf_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForSequenceClassification"] and config["num_labels"] == 1
    assert config["pad_token_id"] is not None and config["pad_token_id"] != config["eos_token_id"]
    assert {"tokenizer.json", "tokenizer_config.json", "model.safetensors"} <= {p.name for p in hf_dir.iterdir()}
    loss, accuracy, _ = hf_metrics(hf_dir, datasets.Dataset.from_parquet(str(setup / "val.parquet")).to_list())
    assert loss == pytest.approx(steps[-1]["val/rm/loss"], rel=1e-5)
    assert accuracy == pytest.approx(steps[-1]["val/rm/accuracy"])

    model, tokenizer = hf_classifier(hf_dir)
    held_out = {"prompt": chat(7, 30), "responses": ["#### 37", "= 37"]}
    with torch.no_grad():
        expected = hf_scores(model, tokenizer, [held_out])[0]
    assert torch.allclose(megatron_scores(hf_dir, encoded(tokenizer, held_out)), expected, rtol=1e-5, atol=1e-5)


def test_context_parallel_scores_and_loss_match_transformers(setup, tmp_path):
    """A sequence-classification checkpoint as the start (its head is read), the whole training set as one batch in
    token-budget micro-batches: the first step's loss, accuracy and gradient norm are the starting model's, and the
    validation after it the written model's, as transformers computes them."""
    from transformers import AutoModelForSequenceClassification

    start = tmp_path / "start"
    make_chat_model(start)
    torch.manual_seed(5)
    AutoModelForSequenceClassification.from_pretrained(start, num_labels=1).save_pretrained(start)
    train = setup / "rankings.parquet"
    out = tmp_path / "run"
    steps = run_rm(setup, out, start, f"[{train}]", "critic.megatron.context_parallel_size=2",
                   "data.train_batch_size=24", "data.use_dynamic_bsz=true", "data.max_token_len_per_gpu=400",
                   "trainer.total_training_steps=1")
    loss, accuracy, grad_norm = hf_metrics(start, datasets.Dataset.from_parquet(str(train)).to_list())
    assert steps[0]["rm/loss"] == pytest.approx(loss, rel=1e-5)
    assert steps[0]["rm/accuracy"] == pytest.approx(accuracy)
    assert steps[0]["rm/grad_norm"] == pytest.approx(grad_norm, rel=1e-4)
    loss, accuracy, _ = hf_metrics(out / "hf", datasets.Dataset.from_parquet(str(setup / "val.parquet")).to_list())
    assert steps[0]["val/rm/loss"] == pytest.approx(loss, rel=1e-5)
    assert steps[0]["val/rm/accuracy"] == pytest.approx(accuracy)
