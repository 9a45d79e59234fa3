import torch

from megarl.algorithms import entropy_from_logits
from megarl.models.logprobs import vocab_parallel_logprobs_and_entropy


def test_matches_log_softmax_and_entropy_with_gradients():
    torch.manual_seed(0)
    logits = torch.randn(2, 7, 33, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 33, (2, 7))
    logprobs, entropy = vocab_parallel_logprobs_and_entropy(logits, labels, temperature=0.7)
    ref_logits = logits / 0.7
    ref = torch.log_softmax(ref_logits.float(), -1).gather(-1, labels[..., None]).squeeze(-1)
    torch.testing.assert_close(logprobs, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, entropy_from_logits(ref_logits.float()), atol=1e-5, rtol=1e-5)
    (logprobs.sum() + entropy.sum()).backward()
    grad = logits.grad.clone()
    logits.grad = None
    (ref.sum() + entropy_from_logits(ref_logits.float()).sum()).backward()
    torch.testing.assert_close(grad, logits.grad, atol=1e-5, rtol=1e-5)


def test_without_entropy():
    logprobs, entropy = vocab_parallel_logprobs_and_entropy(torch.zeros(3, 4), torch.tensor([0, 1, 3]), with_entropy=False)
    assert entropy is None and torch.allclose(logprobs, torch.full((3,), -torch.log(torch.tensor(4.0))))


def test_gradients_of_either_output_alone_and_bf16_input():
    torch.manual_seed(1)
    logits = torch.randn(5, 17, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 17, (5,))
    weights = torch.randn(5, dtype=torch.float64)
    _, entropy = vocab_parallel_logprobs_and_entropy(logits, labels)
    (entropy.double() * weights).sum().backward()
    grad = logits.grad.clone()
    logits.grad = None
    (entropy_from_logits(logits) * weights).sum().backward()
    torch.testing.assert_close(grad, logits.grad, atol=1e-5, rtol=1e-5)
    half = logits.detach().bfloat16().requires_grad_(True)
    logprobs, _ = vocab_parallel_logprobs_and_entropy(half, labels, with_entropy=False)
    logprobs.sum().backward()
    assert half.grad.dtype == torch.bfloat16 and logprobs.dtype == torch.float32
    ref = torch.log_softmax(half.detach().float(), -1).gather(-1, labels[:, None]).squeeze(-1)
    torch.testing.assert_close(logprobs, ref)
