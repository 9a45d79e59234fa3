"""A value-head model (the reward model) as a HF sequence-classification checkpoint: the exported weights (the head
is `score.weight`), the source model's config turned into `<Family>ForSequenceClassification` with one label, and
the tokenizer. `transformers.AutoModelForSequenceClassification` loads it and scores a sequence at its last token
that is not padding, which is where megarl reads the score (`RoleModel.sequence_scores`); `build_critic` starts a
critic from it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable

import torch

from megarl.models.hf_files import copy_hf_metadata, write_hf_checkpoint


def write_sequence_classifier(tensors: Iterable[tuple[str, torch.Tensor]], out_dir: str | Path,
                              source_dir: str | Path, tokenizer) -> None:
    """Write (HF name, tensor) as a sequence-classification checkpoint in `out_dir`, its config derived from the
    one in `source_dir` (the checkpoint training started from), with `tokenizer`."""
    out_dir = Path(out_dir)
    write_hf_checkpoint(tensors, out_dir)
    copy_hf_metadata(source_dir, out_dir)
    pad_id = classifier_pad_id(tokenizer)
    if tokenizer.pad_token_id != pad_id:  # batched HF inputs are padded with the id the config names
        tokenizer.pad_token = tokenizer.convert_ids_to_tokens(pad_id)
    tokenizer.save_pretrained(out_dir)
    config_file = out_dir / "config.json"
    config = json.loads(config_file.read_text())
    config.update(sequence_classifier_config(config, pad_id))
    config_file.write_text(json.dumps(config, indent=2) + "\n")


def classifier_pad_id(tokenizer) -> int:
    """The padding id for the config: HF scores a sequence at its last token that is not padding, and megarl's
    sequences end with eos, so the padding id must differ from eos. The tokenizer's own pad token when it does
    (base models often pad with eos), else its first other special token, else id 0 or 1."""
    eos = tokenizer.eos_token_id
    candidates = [tokenizer.pad_token_id, *tokenizer.all_special_ids, *range(2)]
    return next(i for i in candidates if i is not None and i != eos)


def sequence_classifier_config(source: dict, pad_token_id: int) -> dict:
    """The keys of a HF config.json that make the model in `source` a one-label sequence classifier."""
    return {"architectures": [sequence_classifier_architecture(source)], "num_labels": 1,
            "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}, "pad_token_id": pad_token_id}


def sequence_classifier_architecture(source: dict) -> str:
    """`Qwen2ForCausalLM` → `Qwen2ForSequenceClassification`; from the model type where no architecture is named."""
    architectures = source.get("architectures") or []
    if architectures:
        return re.sub(r"For\w+$", "", architectures[0]) + "ForSequenceClassification"
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

    return MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES[source["model_type"]]
