"""A reward for random-weight benchmark runs, which never answer a GSM8K question: the rule reward is then 0 for every
response, GRPO's advantages are 0 and so is every gradient. A response's decoded length varies from one sample to the
next (the benchmark tokenizer's 400 tokens are a small part of the model's vocabulary), so advantages, gradients and
the KL to the reference move as in a real run. Use with reward.function=benchmarks/decoded_length_reward.py:compute_score.

`costly_score` is the same score after `cost_ms` of CPU work per sample: a reward that takes time, like a sandbox
running the response's code or a symbolic checker on a long answer (reward.kwargs.cost_ms sets it), for measuring
what the rollout's async mode hides behind generation."""

import time


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return len(solution_str) / 1000


def costly_score(data_source, solution_str, ground_truth, extra_info=None, cost_ms=100.0):
    deadline = time.perf_counter() + cost_ms / 1000
    while time.perf_counter() < deadline:  # busy, as such work is: it takes a CPU, not only time
        pass
    return compute_score(data_source, solution_str, ground_truth, extra_info)
