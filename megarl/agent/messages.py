"""The tokens the model's chat template puts between one of its turns and the next when tools answer: the end of the
turn, the tool messages, and the start of the next assistant turn. They are rendered from the template itself, so a
model reads tool results in the form it would at inference, and encoded on their own: the model's own tokens are
never decoded and encoded again (a re-encoded turn can come back as other ids, verl #6719)."""

from __future__ import annotations

from typing import Sequence

# Stands for the model's turn in the rendered conversation: text no model writes.
TURN_MARK = "\u2063megarl-turn\u2063"


class ToolMessages:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        probe = self._between(["probe"])
        if not probe:
            raise ValueError("the tokenizer's chat template renders nothing for a tool message: give the model a "
                             "chat template that renders role 'tool' (model.tokenizer_path)")

    def ids(self, results: Sequence[str], turn_end: str = "") -> list[int]:
        """The ids after a turn that called tools with these `results`; `turn_end`: the text of the stop token the
        model ended its turn with (its end-of-turn token), which the template would render again."""
        between = self._between(results)
        if turn_end and between.startswith(turn_end):
            between = between[len(turn_end):]
        return self.tokenizer.encode(between, add_special_tokens=False)

    def _between(self, results: Sequence[str]) -> str:
        messages = [{"role": "user", "content": "?"}, {"role": "assistant", "content": TURN_MARK},
                    *({"role": "tool", "content": result} for result in results)]
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        if TURN_MARK not in text:
            raise ValueError("the tokenizer's chat template drops the assistant's content; the agent loop cannot place "
                             "tool messages after a turn")
        return text[text.index(TURN_MARK) + len(TURN_MARK):]
