"""The FLOP count behind perf/mfu/actor: 6 FLOPs per weight and token for a full update, 4 for a LoRA actor whose
frozen base needs no weight gradients, and the causal-attention term in both; a critic's output layer is its value
head."""

from types import SimpleNamespace

from megarl.trainer.perf import training_flops

CONFIG = SimpleNamespace(hidden_size=8, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         head_dim=4, intermediate_size=16, vocab_size=10)


def test_training_flops_of_a_full_and_a_lora_update():
    per_layer = 8 * 4 * (2 * 2 + 2 * 1) + 3 * 8 * 16  # q, k, v, o and the gated MLP
    weights = 2 * per_layer + 8 * 10  # and the LM head
    attention = 6 * 2 * 2 * 4 * (3 * 3 + 5 * 5)
    assert training_flops(CONFIG, [3, 5]) == 6 * weights * 8 + attention
    assert training_flops(CONFIG, [3, 5], frozen_weights=True) == 4 * weights * 8 + attention


def test_a_critics_output_layer_is_one_number_per_token_not_the_vocabulary():
    per_layer = 8 * 4 * (2 * 2 + 2 * 1) + 3 * 8 * 16
    attention = 6 * 2 * 2 * 4 * (3 * 3 + 5 * 5)
    assert training_flops(CONFIG, [3, 5], value_head=True) == 6 * (2 * per_layer + 8 * 1) * 8 + attention
