"""SGLang's per-rank parameter layout from the reshard layer's HF-named slices, and the engine's signal handler
(no SGLang needed)."""

import pytest
import torch

from megarl.rollout.sglang_engine import fuse_for_sglang


def test_qkv_and_gate_up_are_fused_in_sglang_order():
    q, k, v = torch.full((4, 2), 1.0), torch.full((2, 2), 2.0), torch.full((2, 2), 3.0)
    gate, up = torch.full((3, 2), 4.0), torch.full((3, 2), 5.0)
    p = "model.layers.7."
    parts = [(p + "self_attn.k_proj.weight", k, 0), (p + "mlp.up_proj.weight", up, 0),
             (p + "self_attn.q_proj.weight", q, 0), (p + "input_layernorm.weight", torch.ones(2), None),
             (p + "self_attn.v_proj.weight", v, 0), (p + "mlp.gate_proj.weight", gate, 0),
             (p + "self_attn.q_proj.bias", q[:, 0], 0), (p + "self_attn.k_proj.bias", k[:, 0], 0),
             (p + "self_attn.v_proj.bias", v[:, 0], 0)]
    fused = dict(fuse_for_sglang(parts))
    assert sorted(fused) == [p + "input_layernorm.weight", p + "mlp.gate_up_proj.weight",
                             p + "self_attn.qkv_proj.bias", p + "self_attn.qkv_proj.weight"]
    assert torch.equal(fused[p + "self_attn.qkv_proj.weight"], torch.cat([q, k, v]))
    assert torch.equal(fused[p + "mlp.gate_up_proj.weight"], torch.cat([gate, up]))
    assert fused[p + "self_attn.qkv_proj.bias"].tolist() == [1.0] * 4 + [2.0] * 2 + [3.0] * 2


def test_a_fused_parameter_split_across_buckets_is_an_error():
    with pytest.raises(ValueError, match="incomplete fused parameters"):
        fuse_for_sglang([("model.layers.0.self_attn.q_proj.weight", torch.zeros(1), 0)])


def test_the_sigquit_handler_pickles_whatever_the_engine_holds():
    """SGLang pickles its SIGQUIT handler into its scheduler processes; an engine of several GPUs holds a process
    group, which does not pickle (a bound method as handler failed SGLang's start at rollout TP 2)."""
    import pickle
    import threading

    from megarl.rollout.sglang_engine import sigquit_handler

    class Engine:
        def __init__(self):
            self.group, self.signals = threading.Lock(), []  # a lock: unpicklable, as a ProcessGroup

        def _child_died(self, signum, frame):
            self.signals.append(signum)

    engine = Engine()
    handler = sigquit_handler(engine)
    pickle.loads(pickle.dumps(handler))(3, None)  # names the same engine (in a scheduler process, none: a no-op)
    handler(3, None)
    assert engine.signals == [3, 3]
    del engine
    handler(3, None)  # the handler does not keep an engine alive, and one gone is nothing to mark
