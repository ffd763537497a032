"""bf16 / fp16 drafters on CPU: the chain stays close to fp32, norms take statistics in fp32 and RoPE
frequencies stay fp32."""

from __future__ import annotations

import pytest
import torch

import drifttool
from drifttool.model.drafter import RMSNorm
from drifttool.model.tiny import tiny_target
from tests.support.ckpt_writer import Case, write
from tests.support.reference_eagle3 import rms_norm

CASE = Case("dtypes", "speculators", hidden=32, heads=4, kv_heads=2, target_hidden=32, aux=[1, 2, 3],
            target_layers=4, draft_vocab=48, flags={"fc_norm": True, "norm_output": True}, seed=31)
CASE3 = Case("dtypes3", "speculators", hidden=32, heads=4, kv_heads=2, target_hidden=32, aux=[1, 2, 3],
             target_layers=4, seed=32)
LOW = [torch.bfloat16, torch.float16]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    target = tiny_target(vocab=64, hidden=32, layers=4, seed=8)
    root = tmp_path_factory.mktemp("dtypes")
    paths = {c.name: write(c, c.weights(None), root / c.name) for c in (CASE, CASE3)}
    return target, paths


@torch.no_grad()
def _chain(drafter, feats, tokens, fed, start: int = 0, depth: int = 6, keys: list | None = None):
    n = feats.shape[0]
    dt = drafter.fc.weight.dtype
    cache = drafter.new_cache()
    hook = None
    if keys is not None:  # post-RoPE keys of the whole cache, as attention sees them
        hook = drafter.layer.self_attn.hook_k.register_forward_hook(lambda m, i, o: keys.append(o.float()))
    step = drafter(tokens[None], feats[None].to(dt), torch.arange(start, start + n)[None], cache, hidden_is_feature=True)
    logits = [step.logits[0, -1].float()]
    for k in range(2, depth + 1):
        step = drafter(fed[None, k - 2 : k - 1], step.feedback[:, -1:], torch.tensor([[start + n - 2 + k]]), cache,
                       hidden_is_feature=False)
        logits.append(step.logits[0, -1].float())
    if hook is not None:
        hook.remove()
    return torch.stack(logits)


def _inputs(target, n=8):
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 64, (n + 1,), generator=g)
    fed = torch.randint(0, 64, (8,), generator=g)
    target.reset()
    return target.forward(tokens[:n]).features, tokens[1:], fed


@pytest.mark.parametrize("name", ["dtypes", "dtypes3"])
@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("start", [0, 8000])
def test_low_precision_chain_close_to_fp32(setup, name, dtype, start):
    target, paths = setup
    ref = drifttool.load_drafter(paths[name], target=target)
    low = drifttool.load_drafter(paths[name], target=target, dtype=dtype)
    assert low.fc.weight.dtype == dtype and low.lm_head.weight.dtype == dtype
    assert low.d2t.dtype == torch.int64
    assert low.inv_freq.dtype == torch.float32
    torch.testing.assert_close(low.inv_freq, ref.inv_freq, atol=0, rtol=0)
    feats, tokens, fed = _inputs(target)
    ka, kb = [], []
    a = _chain(ref, feats, tokens, fed, start, keys=ka)
    b = _chain(low, feats, tokens, fed, start, keys=kb)
    assert torch.isfinite(b).all()
    # rotary angles are position * fp32 frequency even at position 8000 (a bf16 inv_freq is off by up to
    # position * 2^-9 radians there: keys 40% off in bf16, 10% in fp16; correct: < 1%)
    for x, y in zip(ka, kb):
        assert (x - y).norm() < 0.02 * x.norm()
    scale = a.abs().max()
    tol = 0.04 if dtype == torch.bfloat16 else 0.01  # seen: 1.6% and 0.2%
    assert (a - b).abs().max() < tol * scale, float((a - b).abs().max() / scale)
    # the same draft token at most depths (ties aside)
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() >= 0.6


def test_rope_frequencies_survive_casts(setup):
    target, paths = setup
    d = drifttool.load_drafter(paths["dtypes"], target=target)
    f32 = d.inv_freq.clone()
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        d = d.to(dt)
        assert d.inv_freq.dtype == torch.float32
        torch.testing.assert_close(d.inv_freq, f32, atol=0, rtol=0)
    d.half().float()
    torch.testing.assert_close(d.inv_freq, f32, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_rmsnorm_statistics_in_fp32(dtype):
    """x**2 overflows fp16 (300^2 > 65504) and loses bits in bf16; the norm must not."""
    n = RMSNorm(16, 1e-6)
    with torch.no_grad():
        n.weight.copy_(torch.linspace(0.5, 1.5, 16))
    x = torch.linspace(-300, 300, 16)[None] + torch.randn(2, 16, generator=torch.Generator().manual_seed(0))
    assert not torch.isfinite(x.to(torch.float16).pow(2)).all() or dtype == torch.bfloat16
    got = n.to(dtype)(x.to(dtype))
    assert got.dtype == dtype and torch.isfinite(got).all()
    want = rms_norm(x, torch.linspace(0.5, 1.5, 16), 1e-6)
    torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_large_fed_back_hidden_stays_finite(setup, dtype):
    """An EAGLE-3 pre-norm feedback of magnitude ~1000 (fp16 squares overflow) still gives finite logits that
    match fp32."""
    target, paths = setup
    ref = drifttool.load_drafter(paths["dtypes3"], target=target)
    low = drifttool.load_drafter(paths["dtypes3"], target=target, dtype=dtype)
    feats, tokens, _ = _inputs(target)
    g = torch.Generator().manual_seed(1)
    big = 1000 * torch.randn(1, 1, 32, generator=g)
    out = []
    with torch.no_grad():
        for d in (ref, low):
            dt = d.fc.weight.dtype
            cache = d.new_cache()
            d(tokens[None], feats[None].to(dt), torch.arange(8)[None], cache, hidden_is_feature=True)
            step = d(torch.tensor([[5]]), big.to(dt), torch.tensor([[8]]), cache, hidden_is_feature=False)
            assert torch.isfinite(step.logits).all() and torch.isfinite(step.post).all()
            out.append(step.logits.float())
    assert (out[0] - out[1]).abs().max() < 0.06 * out[0].abs().max()
