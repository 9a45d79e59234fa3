"""The FLOP count behind perf/mfu/actor: 6 FLOPs per weight and token for a full update, 4 for a LoRA actor whose
frozen base needs no weight gradients, and the causal-attention term in both; a critic's output layer is its value
head. Throughput counts every GPU of the run, MFU the actor's."""

from types import SimpleNamespace

from megarl.trainer.perf import peak_flops, perf_metrics, training_flops

CONFIG = SimpleNamespace(hidden_size=8, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         head_dim=4, intermediate_size=16, vocab_size=10)


def test_training_flops_of_a_full_and_a_lora_update():
    per_layer = 8 * 4 * (2 * 2 + 2 * 1) + 3 * 8 * 16  # q, k, v, o and the gated MLP
    weights = 2 * per_layer + 8 * 10  # and the LM head
    attention = 6 * 2 * 2 * 4 * (3 * 3 + 5 * 5)
    assert training_flops(CONFIG, [3, 5]) == 6 * weights * 8 + attention
    assert training_flops(CONFIG, [3, 5], frozen_weights=True) == 4 * weights * 8 + attention


def test_a_mixture_of_experts_layer_counts_its_router_and_the_experts_a_token_is_routed_to():
    moe = SimpleNamespace(**vars(CONFIG), num_experts=6, num_experts_per_tok=2, moe_intermediate_size=5)
    per_layer = 8 * 4 * (2 * 2 + 2 * 1) + 8 * 6 + 2 * 3 * 8 * 5
    attention = 6 * 2 * 2 * 4 * (3 * 3 + 5 * 5)
    assert training_flops(moe, [3, 5]) == 6 * (2 * per_layer + 8 * 10) * 8 + attention


def test_a_critics_output_layer_is_one_number_per_token_not_the_vocabulary():
    per_layer = 8 * 4 * (2 * 2 + 2 * 1) + 3 * 8 * 16
    attention = 6 * 2 * 2 * 4 * (3 * 3 + 5 * 5)
    assert training_flops(CONFIG, [3, 5], value_head=True) == 6 * (2 * per_layer + 8 * 1) * 8 + attention


def test_throughput_is_per_gpu_of_the_run_and_the_actors_mfu_per_gpu_of_the_actor():
    import torch

    from parallel.batch import Batch

    batch = Batch(tensors={"response_mask": torch.tensor([[1, 1, 0], [1, 1, 1]])}, fields={"prompt_ids": [[1], [2, 3]]})
    device = {"cpu_memory_used_gb": 1.0, "name": "NVIDIA H100 80GB HBM3"}
    metrics = {"timing_s/step": 2.0, "timing_s/update_actor": 0.5}
    # One GPU trains, one generates (rollout.enable_resource_pool): 8 tokens in 2 s on 2 GPUs.
    out = perf_metrics(batch, metrics, gpus=2, actor_gpus=1, hf_config=CONFIG, ppo_epochs=1, device=device)
    assert out["perf/throughput"] == 8 / (2.0 * 2)
    assert out["perf/mfu/actor"] == training_flops(CONFIG, [3, 5]) / (0.5 * 1 * peak_flops(device["name"]))


def test_the_most_allocated_is_the_largest_phase_allocation_of_the_step():
    """Not torch's peak counter, which the weight sync resets to time its own peak: the memory sampler's phases."""
    import torch

    from parallel.batch import Batch

    batch = Batch(tensors={"response_mask": torch.tensor([[1, 1]])}, fields={"prompt_ids": [[1]]})
    device = {"cpu_memory_used_gb": 1.0, "name": "cpu"}
    metrics = {"timing_s/step": 1.0, "memory/gen/allocated_gb": 3.0, "memory/update_actor/allocated_gb": 21.5,
               "memory/sync/allocated_gb": 4.5, "memory/update_actor/reserved_gb": 30.0}
    out = perf_metrics(batch, metrics, gpus=1, actor_gpus=1, hf_config=CONFIG, ppo_epochs=1, device=device)
    assert out["perf/max_memory_allocated_gb"] == 21.5
    no_gpu = perf_metrics(batch, {"timing_s/step": 1.0}, gpus=1, actor_gpus=1, hf_config=CONFIG, ppo_epochs=1,
                          device=device)
    assert "perf/max_memory_allocated_gb" not in no_gpu
