import pytest
import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

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


def _reference(logits, labels, temperature):
    scaled = logits.double() / temperature
    logprobs = torch.log_softmax(scaled, -1).gather(-1, labels[..., None]).squeeze(-1)
    return logprobs, entropy_from_logits(scaled)


@pytest.mark.parametrize("dtype,with_entropy,fused", [
    (torch.float64, True, False), (torch.float64, False, False), (torch.bfloat16, True, False),
    (torch.bfloat16, False, False),
    (torch.bfloat16, True, True),  # torch.compile'd chunks (the GPU's path; one case: compiling takes ~30 s here)
])
def test_chunked_matches_unchunked_and_reference(dtype, with_entropy, fused):
    torch.manual_seed(2)
    logits = (3 * torch.randn(2, 5, 41, dtype=torch.float64)).to(dtype)
    labels = torch.randint(0, 41, (2, 5))
    weights = torch.randn(2, 2, 5, dtype=torch.float64)
    results = []
    for compute in (lambda x: vocab_parallel_logprobs_and_entropy(x, labels, 0.6, with_entropy, chunk_tokens=3,
                                                                  fused=fused),
                    lambda x: vocab_parallel_logprobs_and_entropy(x, labels, 0.6, with_entropy, chunk_tokens=10,
                                                                  fused=fused),
                    lambda x: _reference(x, labels, 0.6)):
        x = logits.detach().clone().requires_grad_(True)
        outputs = [o.double() for o in compute(x)[: 2 if with_entropy else 1]]
        sum(((o * w).sum() for o, w in zip(outputs, weights)), torch.zeros((), dtype=torch.float64)).backward()
        results.append((outputs, x.grad))
    tolerance = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float64 else {"atol": 2e-2, "rtol": 2e-2}
    for outputs, grad in results[1:]:
        assert grad.dtype == dtype
        for output, expected in zip(outputs, results[0][0]):
            torch.testing.assert_close(output, expected, **tolerance)
        torch.testing.assert_close(grad.double(), results[0][1].double(), **tolerance)


class _LargestOutputs(TorchDispatchMode):
    """Records every tensor an op produces that does not alias `source`, as (elements, dtype, storage)."""

    def __init__(self, source):
        super().__init__()
        self.source = source.untyped_storage().data_ptr()
        self.produced = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in pytree.tree_leaves(out):
            if isinstance(tensor, torch.Tensor) and tensor.untyped_storage().data_ptr() != self.source:
                self.produced.append((tensor.numel(), tensor.dtype, tensor.untyped_storage().data_ptr()))
        return out


def largest_temporary(compute, tokens=64, vocab=1000, dtype=torch.bfloat16):
    """Largest tensor (in elements) that `compute` creates in forward+backward besides the input's gradient,
    which must be one [tokens × vocab] tensor in the input dtype."""
    torch.manual_seed(3)
    logits = torch.randn(1, tokens, vocab, dtype=dtype).requires_grad_(True)
    labels = torch.randint(0, vocab, (1, tokens))
    with _LargestOutputs(logits) as mode:
        logprobs, entropy = compute(logits, labels)
        (logprobs.sum() + 0.1 * entropy.sum()).backward()
    grad_storage = logits.grad.untyped_storage().data_ptr()
    rest = [(n, d) for n, d, storage in mode.produced if storage != grad_storage]
    assert logits.grad.dtype == dtype
    return max(n for n, _ in rest)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_temporaries_are_bounded_by_the_chunk(dtype):
    chunk_tokens, vocab = 8, 1000
    largest = largest_temporary(lambda x, y: vocab_parallel_logprobs_and_entropy(
        x, y, temperature=0.8, chunk_tokens=chunk_tokens), vocab=vocab, dtype=dtype)
    assert largest <= chunk_tokens * vocab
