import torch

from megarl.rollout.base import Response
from megarl.rollout.batch import prompt_batch, with_responses
from megarl.workers.columns import at_next_token_positions, response_values, sequences


def make():
    prompts = prompt_batch({"prompt_ids": [[1, 2, 3], [4, 5]], "data_source": ["gsm8k", "math"]}, first_uid=10)
    responses = [[Response([7, 8], [-0.1, -0.2], "stop"), Response([9], [-0.3], "length")],
                 [Response([6, 6, 6], [-1.0, -1.0, -1.0], "length"), Response([5, 4], [-0.5, -0.4], "stop")]]
    return with_responses(prompts, responses)


def test_sequences_and_per_token_values_line_up_with_responses():
    batch = make()
    assert [s.tolist() for s in sequences(batch)] == [[1, 2, 3, 7, 8], [1, 2, 3, 9], [4, 5, 6, 6, 6], [4, 5, 5, 4]]
    # a model pass gives, at position t, a value about token t + 1: here the token id itself
    per_sequence = [s[1:].float() for s in sequences(batch)]
    assert torch.equal(response_values(batch, per_sequence), batch["responses"].float())


def test_next_token_positions_invert_response_values():
    batch = make()
    per_sequence = at_next_token_positions(batch, batch["responses"].float())
    assert [len(v) for v in per_sequence] == [len(s) - 1 for s in sequences(batch)]
    assert per_sequence[0].tolist() == [0.0, 0.0, 7.0, 8.0]  # zero on the prompt
    assert torch.equal(response_values(batch, per_sequence), batch["responses"].float())
