import torch
from megatron.core.utils import local_multi_tensor_scale

from megarl.models.fallbacks import multi_tensor_l2_norm, multi_tensor_scale


def test_matches_the_norm_of_norms_megatrons_fallback_computes():
    torch.manual_seed(0)
    tensors = [torch.randn(7, 3), torch.randn(11), torch.randn(2, 2, 2)]
    ours, _ = multi_tensor_l2_norm(2048, None, [tensors], False)
    theirs = torch.norm(torch.stack([torch.norm(t) for t in tensors]))
    assert ours.dtype == torch.float32 and ours.shape == (1,)
    torch.testing.assert_close(ours[0], theirs)
    empty, _ = multi_tensor_l2_norm(2048, None, [[]], False)
    assert empty.tolist() == [0.0]


def test_scale_matches_megatrons_fallback_in_place_and_into_other_tensors():
    torch.manual_seed(0)
    sources = [torch.randn(7, 3), torch.randn(11)]
    ours, theirs = [t.clone() for t in sources], [t.clone() for t in sources]
    multi_tensor_scale(2048, None, [ours, ours], 0.25)
    local_multi_tensor_scale(2048, None, [theirs, theirs], 0.25)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    ours_out = [torch.empty(7, 3, dtype=torch.bfloat16), torch.empty(11, dtype=torch.bfloat16)]
    theirs_out = [torch.empty_like(t) for t in ours_out]
    multi_tensor_scale(2048, None, [sources, ours_out], 3.0)
    local_multi_tensor_scale(2048, None, [sources, theirs_out], 3.0)
    torch.testing.assert_close(ours_out, theirs_out, rtol=0, atol=0)
    multi_tensor_scale(2048, None, [[], []], 2.0)
