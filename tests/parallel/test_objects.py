import torch

from parallel.objects import object_tensor, tensor_object


def test_an_object_survives_its_byte_tensor_and_the_tensor_owns_its_bytes():
    value = {"names": ["a.weight", "b.bias"], "shape": (3, 4), "none": None}
    payload = object_tensor(value)
    assert payload.dtype == torch.uint8 and payload.dim() == 1
    received = torch.empty_like(payload).copy_(payload)
    payload.zero_()  # the sender's buffer reused: what was received is unaffected
    assert tensor_object(received) == value
