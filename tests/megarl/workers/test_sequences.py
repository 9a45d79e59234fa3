import torch

from megarl.workers.sequences import at_next_token_positions, response_values, sequences
from tests.helpers import responses_batch


def test_sequences_and_per_token_values_line_up_with_responses():
    batch = responses_batch()
    assert [s.tolist() for s in sequences(batch)] == [[1, 2, 3, 7, 8], [1, 2, 3, 9], [4, 5, 6, 6, 6], [4, 5, 5, 4]]
    # a model pass gives, at position t, a value about token t + 1: here the token id itself
    per_sequence = [s[1:].float() for s in sequences(batch)]
    assert torch.equal(response_values(batch, per_sequence), batch["responses"].float())


def test_next_token_positions_invert_response_values():
    batch = responses_batch()
    per_sequence = at_next_token_positions(batch, batch["responses"].float())
    assert [len(v) for v in per_sequence] == [len(s) - 1 for s in sequences(batch)]
    assert per_sequence[0].tolist() == [0.0, 0.0, 7.0, 8.0]  # zero on the prompt
    assert torch.equal(response_values(batch, per_sequence), batch["responses"].float())
