"""EAGLE-3 feeds back the un-normalised residual, whose RMS grows with depth; loading the same weights
with norm_output=true (EAGLE-3.1 feedback) keeps the fed-back tensor at the norm weight's scale."""

from __future__ import annotations

import pytest
import torch

import drifttool
from drifttool.model.tiny import tiny_target
from tests.support.ckpt_writer import Case, write

DEPTH = 8
CASE = Case("eagle3-growth", "speculators", hidden=32, heads=4, kv_heads=2, target_hidden=32, aux=[1, 2, 3],
            target_layers=4, seed=11)


def _amplifying_weights(target):
    """Random weights, except a SwiGLU MLP that adds c*s*m^2*tanh(s*m/2) ~ sign(m) along m = the normalised
    residual (gate = s[I; -I], up = [I; -I], down = c[I, -I], plus noise): every depth pushes the
    residual further along itself, as trained EAGLE-3 drafters are observed to (docs/eagle3.md §8)."""
    w = CASE.weights(target.input_embeddings())
    h = CASE.hidden
    g = torch.Generator().manual_seed(0)
    eye = torch.eye(h)
    s, c = 2.0, 0.5
    w["gate"] = s * torch.cat([eye, -eye]) + 0.05 * torch.randn(2 * h, h, generator=g)
    w["up"] = torch.cat([eye, -eye]) + 0.05 * torch.randn(2 * h, h, generator=g)
    w["down"] = c * torch.cat([eye, -eye], 1) + 0.05 * torch.randn(h, 2 * h, generator=g)
    w["norm"] = 1.0 + 0.1 * torch.randn(h, generator=g)
    return w


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    target = tiny_target(vocab=CASE.vocab, hidden=CASE.target_hidden, layers=CASE.target_layers, seed=2)
    w = _amplifying_weights(target)
    return target, w, write(CASE, w, tmp_path_factory.mktemp("growth") / "eagle3")


def rms(x: torch.Tensor) -> float:
    return float(x.float().pow(2).mean().sqrt())


@torch.no_grad()
def _fed_back_rms(drafter, target, n_ctx: int = 10) -> tuple[list[float], list[torch.Tensor]]:
    g = torch.Generator().manual_seed(4)
    tokens = torch.randint(0, CASE.vocab, (n_ctx + 1,), generator=g)
    fed = torch.randint(0, CASE.vocab, (DEPTH,), generator=g)
    target.reset()
    feats = target.forward(tokens[:n_ctx]).features
    cache = drafter.new_cache()
    step = drafter(tokens[None, 1:], feats[None], torch.arange(n_ctx)[None], cache, hidden_is_feature=True)
    step_last = [step]
    out = [rms(step.feedback[0, -1])]
    for k in range(2, DEPTH + 1):
        step = drafter(fed[None, k - 2 : k - 1], step.feedback[:, -1:], torch.tensor([[n_ctx - 1 + k - 1]]), cache,
                       hidden_is_feature=False)
        step_last.append(step)
        out.append(rms(step.feedback[0, -1]))
    return out, step_last


def test_eagle3_feedback_rms_grows_with_depth(checkpoint):
    target, _, path = checkpoint
    d = drifttool.load_drafter(path, target=target)
    assert d.config.variant == "eagle3" and not d.config.norm_output and d.config.overrides == {}
    r, steps = _fed_back_rms(d, target)
    for s in steps:  # EAGLE-3 feeds back `pre`
        assert torch.equal(s.feedback, s.pre)
    assert all(b > a for a, b in zip(r, r[1:])), r  # grows at every depth
    assert r[-1] > 3 * r[0], r


def test_norm_output_override_bounds_feedback(checkpoint):
    target, w, path = checkpoint
    d = drifttool.load_drafter(path, target=target, overrides={"norm_output": True})
    assert d.config.norm_output is True
    assert d.config.overrides == {"norm_output": {"checkpoint": False, "override": True}}
    assert d.config.variant == "eagle3-mixed"
    r, steps = _fed_back_rms(d, target)
    for s in steps:  # EAGLE-3.1 feeds back `post`, the tensor lm_head sees
        assert torch.equal(s.feedback, s.post)
    scale = rms(w["norm"])  # post = norm.weight * unit-RMS vector
    assert all(abs(x - scale) < 0.15 * scale for x in r), (r, scale)
    assert max(r) / min(r) < 1.3
    # the pre-norm residual under the override no longer compounds (inputs are unit-scale every depth)
    pre = [rms(s.pre[0, -1]) for s in steps]
    grow, _ = _fed_back_rms(drifttool.load_drafter(path, target=target), target)
    assert max(pre) < grow[-1] / 2


def test_override_accepts_cli_strings(checkpoint):
    target, _, path = checkpoint
    d = drifttool.load_drafter(path, target=target, overrides={"norm_output": "true", "norm_before_residual": "0"})
    assert d.config.overrides["norm_output"] == {"checkpoint": False, "override": True}
    assert d.config.overrides["norm_before_residual"] == {"checkpoint": False, "override": False}
    # the weights hash ignores provenance but the flags differ
    plain = drifttool.load_drafter(path, target=target)
    assert plain.config.config_hash() != d.config.config_hash()
