"""`megarl sft` end to end on CPU: a tiny Qwen2 model with a real tokenizer learns four chat prompt → answer
pairs. Under torchrun (TP=2) it memorises them: the exported HF checkpoint, loaded by transformers, answers each
training prompt with its response; under Ray (DP=2, one sample per micro-batch) the losses it logs are those
transformers computes for the same weights. Either way the first step's loss is the untrained model's token-mean
NLL over the whole batch, and the validation loss after the last step is the exported model's."""

import json
import sys

import datasets
import pytest
import torch

from tests.helpers import make_chat_model, run_command

PAIRS = [(1, 2), (3, 4), (2, 5), (6, 1)]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft")
    make_chat_model(root / "model")
    rows = [{"prompt": [{"role": "user", "content": f"What is {a} + {b}?"}],
             "extra_info": {"answer": f"{a} + {b} = {a + b} #### {a + b}"}} for a, b in PAIRS]
    datasets.Dataset.from_list(rows).to_parquet(str(root / "train.parquet"))
    return root


def run_sft(root, out, launcher_prefix, *extra):
    data = root / "train.parquet"
    cmd = [*launcher_prefix, "megarl.sft", f"model.path={root / 'model'}", f"data.train_files=[{data}]",
           f"data.val_files=[{data}]", f"trainer.output_dir={out}", "data.train_batch_size=4", "data.max_length=64",
           "trainer.n_gpus_per_node=2", "trainer.collective_timeout_s=120", "optim.lr=3e-3", *extra]
    proc = run_command(cmd, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    assert f"SFT model written to {out / 'hf'}" in proc.stdout
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def with_transformers(model_dir, greedy=False):
    """The token-mean NLL of the training responses (+ eos) under the HF model at `model_dir`, and with
    `greedy` whether greedy decoding reproduces each of them."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    nll = tokens = 0.0
    reproduced = []
    for a, b in PAIRS:
        chat = [{"role": "user", "content": f"What is {a} + {b}?"}]
        prompt = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        response_ids = tokenizer(f"{a} + {b} = {a + b} #### {a + b}", add_special_tokens=False)["input_ids"]
        response_ids.append(tokenizer.eos_token_id)
        ids = torch.tensor([prompt_ids + response_ids])
        with torch.no_grad():
            logprobs = torch.log_softmax(model(ids).logits[0, :-1].float(), dim=-1)
        nll -= logprobs.gather(-1, ids[0, 1:, None])[len(prompt_ids) - 1 :].sum().item()
        tokens += len(response_ids)
        if greedy:
            out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=len(response_ids) + 4, do_sample=False)
            reproduced.append(out[0, len(prompt_ids) :].tolist() == response_ids)
    return nll / tokens, reproduced


def test_sft_under_torchrun_memorises_the_responses(setup, tmp_path):
    out = tmp_path / "run"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m"]
    steps = run_sft(setup, out, torchrun, "actor.megatron.tensor_model_parallel_size=2",
                    "data.micro_batch_size_per_gpu=2", "optim.lr_decay_style=constant", "trainer.total_epochs=80")
    assert [s["step"] for s in steps] == list(range(1, 81))
    assert {"train/loss", "train/grad_norm", "train/lr", "train/epoch"} <= steps[0].keys()
    assert "val/loss" in steps[-1] and "val/loss" not in steps[-2]  # test_freq=-1: after the last step only
    initial_loss, _ = with_transformers(setup / "model")
    assert steps[0]["train/loss"] == pytest.approx(initial_loss, rel=1e-5)
    assert steps[-1]["train/loss"] < 0.05 * steps[0]["train/loss"]
    loss, reproduced = with_transformers(out / "hf", greedy=True)
    assert loss == pytest.approx(steps[-1]["val/loss"], rel=1e-5)
    assert reproduced == [True] * len(PAIRS)
    assert {"config.json", "tokenizer.json", "tokenizer_config.json"} <= {p.name for p in (out / "hf").iterdir()}


def test_sft_under_ray_with_data_parallel_micro_batches(setup, tmp_path):
    out = tmp_path / "run"
    steps = run_sft(setup, out, [sys.executable, "-m"], "data.micro_batch_size_per_gpu=1",
                    "trainer.total_training_steps=2", "trainer.test_freq=1", f"model.tokenizer_path={setup / 'model'}")
    assert [s["step"] for s in steps] == [1, 2]
    initial_loss, _ = with_transformers(setup / "model")
    assert steps[0]["train/loss"] == pytest.approx(initial_loss, rel=1e-5)
    assert steps[0]["val/loss"] == pytest.approx(steps[1]["train/loss"], rel=1e-5)  # the same four samples
    loss, _ = with_transformers(out / "hf")
    assert loss == pytest.approx(steps[1]["val/loss"], rel=1e-5)
