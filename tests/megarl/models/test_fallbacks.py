import torch
from megarl.models.fallbacks import multi_tensor_l2_norm


def test_matches_the_norm_of_norms_megatrons_fallback_computes():
    torch.manual_seed(0)
    tensors = [torch.randn(7, 3), torch.randn(11), torch.randn(2, 2, 2)]
    ours, _ = multi_tensor_l2_norm(2048, None, [tensors], False)
    theirs = torch.norm(torch.stack([torch.norm(t) for t in tensors]))
    assert ours.dtype == torch.float32 and ours.shape == (1,)
    torch.testing.assert_close(ours[0], theirs)
    empty, _ = multi_tensor_l2_norm(2048, None, [[]], False)
    assert empty.tolist() == [0.0]
