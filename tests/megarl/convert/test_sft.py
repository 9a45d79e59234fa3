"""`megarl convert` on verl's SFT launch scripts (verl_scripts/sft_*.sh, verl's examples/sft/gsm8k scripts as they
are): `torchrun -m verl.trainer.fsdp_sft_trainer` becomes a `megarl sft` recipe that passes `--dry-run` (its
prompt and response paths found in the data) and means what verl's run meant, key by key."""

import json
from functools import reduce
from pathlib import Path

import datasets
import pytest

from megarl.config import SFT_RECIPE, load_config
from megarl.convert.command import main as convert_main
from megarl.convert.translate import convert
from megarl.sft import main as sft_main
from tests.helpers import make_tokenizer
from tests.megarl.convert.test_command import _section

SCRIPTS = Path(__file__).parent / "verl_scripts"
VERL_SFT = {  # verl's sft_trainer.yaml where megarl's defaults differ, and what both scripts set
    "data.train_batch_size": 256, "optim.betas": [0.9, 0.95], "actor.megatron.recompute_granularity": "full",
    "data.prompt_key": "extra_info.question", "data.response_key": "extra_info.answer", "optim.lr": 1e-4,
    "data.micro_batch_size_per_gpu": 4, "trainer.project_name": "gsm8k-sft", "trainer.logger": ["console"],
    "trainer.n_gpus_per_node": 2, "trainer.nnodes": 1}  # torchrun's --nproc_per_node=$1
EXPECTED = {
    "sft_qwen_05_sp2.sh": {**VERL_SFT, "actor.megatron.context_parallel_size": 2, "trainer.total_epochs": 4,
                           "trainer.total_training_steps": 1, "optim.lr_warmup_steps": 0},
    "sft_qwen_05_peft.sh": {**VERL_SFT, "actor.megatron.context_parallel_size": 1, "trainer.total_epochs": 1},
}
NOT_CARRIED = {
    "sft_qwen_05_sp2.sh": ["data.micro_batch_size"],  # verl's SFT trainer ignores it too
    "sft_qwen_05_peft.sh": ["model.lora_rank", "model.lora_alpha", "model.target_modules"],
}


@pytest.fixture
def verl_home(tmp_path, monkeypatch):
    """$HOME with verl's gsm8k SFT data (the question and answer in an extra_info struct) and the model the scripts
    name, as a local directory of that name."""
    model = tmp_path / "Qwen" / "Qwen2.5-0.5B-Instruct"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2", "num_attention_heads": 8,
                                                   "num_key_value_heads": 4, "num_hidden_layers": 2,
                                                   "max_position_embeddings": 4096, "vocab_size": 512}))
    make_tokenizer(model)
    (tmp_path / "data" / "gsm8k").mkdir(parents=True)
    row = {"question": "1+1?", "answer": "#### 2", "extra_info": {"question": "1+1?", "answer": "#### 2"}}
    for split in ("train", "test"):
        datasets.Dataset.from_list([row] * 4).to_parquet(str(tmp_path / "data" / "gsm8k" / f"{split}.parquet"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # where the model's HF name is a local path
    return tmp_path


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_a_verl_sft_script_converts_to_an_sft_recipe_with_verls_meaning(script, verl_home, capsys):
    recipe, save_path = verl_home / "sft.yaml", verl_home / "ckpt"
    assert convert_main([str(SCRIPTS / script), "2", str(save_path), "--out", str(recipe)]) == 0
    report = capsys.readouterr().err
    assert "next: megarl sft --recipe" in report and "verl's sft_trainer config" in report
    assert [line.split("=")[0] for line in _section(report, "not carried over")] == NOT_CARRIED[script], report
    assert sft_main(["--recipe", str(recipe), "--dry-run"]) == 0, capsys.readouterr().err
    cfg = load_config(save_path / "config.yaml", schema=SFT_RECIPE)
    assert cfg.trainer.output_dir == str(save_path)  # verl's trainer.default_local_dir=$save_path
    for key, expected in EXPECTED[script].items():
        assert reduce(getattr, key.split("."), cfg) == expected, key


def test_verls_sft_keys_and_defaults_without_a_script():
    conversion = convert(["model.partial_pretrain=/m", "data.prompt_key=prompt", "optim.lr_scheduler=wsd",
                          "trainer.total_training_steps=50"])
    assert conversion.schema is SFT_RECIPE  # model.partial_pretrain is the SFT trainers' alone
    lines = {key: line.value for key, line in conversion.lines.items()}
    assert lines["data.prompt_key"] == "prompt" and lines["data.response_key"] == "answer"  # verl's default
    assert lines["optim.lr_warmup_steps"] == 5  # verl's lr_warmup_steps_ratio 0.1 of the run's 50 steps
    assert any(line.startswith("optim.lr_scheduler=wsd: megarl's schedules") for line in conversion.dropped)
    assert any("--nproc_per_node" in note for note in conversion.notes)  # no torchrun here to take the size from
    engine = convert(["model.path=/m", "engine=megatron", "engine.tensor_model_parallel_size=2",
                      "engine.vanilla_mbridge=true"], module="verl.trainer.sft_trainer")
    assert engine.verl_config == "sft_trainer_engine" and engine.megatron
    assert engine.lines["actor.megatron.tensor_model_parallel_size"].value == 2
    assert engine.dropped == ["engine.vanilla_mbridge=true: a setting of verl's training engine: megarl's is "
                              "megatron-core (actor.megatron.*)"]  # engine=megatron is what megarl runs
    assert any("data.messages_key" in note for note in engine.notes)
