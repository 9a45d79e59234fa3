"""A reward for random-weight benchmark runs, which never answer a GSM8K question: the rule reward is then 0 for every
response, GRPO's advantages are 0 and so is every gradient. A response's decoded length varies from one sample to the
next (the benchmark tokenizer's 400 tokens are a small part of the model's vocabulary), so advantages, gradients and
the KL to the reference move as in a real run. Use with reward.function=benchmarks/decoded_length_reward.py:compute_score."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return len(solution_str) / 1000
