import torch

from parallel.objects import object_tensor, tensor_object


def test_an_object_survives_its_byte_tensor():
    value = {"names": ["a.weight", "b.bias"], "shape": (3, 4), "none": None}
    payload = object_tensor(value)
    assert payload.dtype == torch.uint8 and payload.dim() == 1
    assert tensor_object(torch.empty_like(payload).copy_(payload)) == value
