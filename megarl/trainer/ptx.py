"""PPO-ptx (InstructGPT): the pretraining samples the driver hands the actor's update with each step's batch.

Each step draws as many pretraining samples as the batch has responses (data.train_batch_size × rollout.n), so
that every mini-batch of the update pairs its RL samples with as many pretraining samples; the actor adds
`actor.ptx_coef` × their mean NLL to each optimizer step's loss (megarl/workers/actor.py). The loader's position
is part of the checkpoint, so a resumed run draws what an uninterrupted one would.
"""

from __future__ import annotations

from megarl.columns import PROMPT_IDS, PTX_PROMPT_IDS, PTX_RESPONSE_MASK, PTX_RESPONSES, RESPONSE_MASK, RESPONSES, stage
from megarl.config.schema import MegaRLConfig
from megarl.data.dataset import PromptLoader
from megarl.data.sft_dataset import SFTDataset, sft_batch
from parallel.batch import Batch


def pretraining_loader(cfg: MegaRLConfig, tokenizer) -> PromptLoader | None:
    """Batches of `data.ptx_files` samples, at most prompt + response length each (longer ones keep their
    start); None without PPO-ptx."""
    if cfg.actor.ptx_coef == 0:
        return None
    data = cfg.data
    dataset = SFTDataset(data.ptx_files, tokenizer, prompt_key=data.ptx_prompt_key,
                         response_key=data.ptx_response_key,
                         max_length=data.max_prompt_length + data.max_response_length, truncation="right",
                         config_keys=("data.ptx_prompt_key", "data.ptx_response_key"))
    return PromptLoader(dataset, data.train_batch_size * cfg.rollout.n, shuffle=data.shuffle,
                        seed=cfg.trainer.seed)


@stage(writes=(PTX_PROMPT_IDS, PTX_RESPONSES, PTX_RESPONSE_MASK))
def pretraining_columns(items: dict[str, list], rows: int) -> Batch:
    """The first `rows` samples of a loader batch as the update's `ptx_prompt_ids`, `ptx_responses` and
    `ptx_response_mask` columns (a step that trains fewer groups, under dynamic sampling, takes fewer)."""
    batch = sft_batch({key: values[:rows] for key, values in items.items()})
    return Batch({PTX_RESPONSES: batch[RESPONSES], PTX_RESPONSE_MASK: batch[RESPONSE_MASK]},
                 {PTX_PROMPT_IDS: batch[PROMPT_IDS]})
