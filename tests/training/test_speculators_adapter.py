"""drifttool's drift logger inside speculators (drifttool/train_speculators.py), on the real `speculators` package
(its own environment: scripts/test_speculators.sh; skipped where it is not installed). A tiny EAGLE-3 in
speculators' own format, its verifier drifttool's tiny target:

- drifttool reads what speculators saves: its unrolled training forward (TTT) gives the logits of speculators' own
  forward at every step, for EAGLE-3 (norm_before_residual) and EAGLE-3.1 (fc_norm, norm_output), with trained-looking
  (non-unit) norms;
- the wrapped forward adds the `drift/...` scalars to the metrics speculators' trainer logs, on due logged steps in
  training mode only; they survive its metric normalisation; the model trains on (loss and gradients unchanged);
- the logged numbers equal an offline `drifttool capture` of the saved checkpoint on the same probes.
Not run: speculators' Trainer itself (it moves every batch to `local_rank`, a CUDA device, so it does not run on
CPU); the adapter attaches to it through `trainer.model`, `trainer.global_step` and `trainer.config.log_freq`, which a
stand-in object with those three attributes exercises here."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

speculators = pytest.importorskip("speculators")

from speculators.config import SpeculatorsConfig, VerifierConfig  # noqa: E402
from speculators.losses import resolve_loss_config  # noqa: E402
from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig  # noqa: E402
from speculators.proposals.greedy import GreedyTokenProposalConfig  # noqa: E402
from speculators.train.utils import normalize_counted_metrics  # noqa: E402
from transformers import LlamaConfig  # noqa: E402

import drifttool as dt  # noqa: E402
from drifttool.errors import DriftError  # noqa: E402
from drifttool.model.tiny import tiny_target  # noqa: E402
from drifttool.train_log import DriftLogger  # noqa: E402
from drifttool.train_speculators import attach_speculators, to_drafter, wrap_forward  # noqa: E402
from tests.support.capture import TINY, offline_drift_summary, prompt  # noqa: E402

VARIANTS = {"eagle3": {"norm_before_residual": True}, "eagle3.1": {"fc_norm": True, "norm_output": True}}
AUX = [1, 2, 3]
LOSS = resolve_loss_config("kl_div", "eager")  # the fused losses need Triton (a GPU); the eager ones are the same math


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    root = tmp_path_factory.mktemp("spec")
    t = tiny_target(**TINY)
    t.model.save_pretrained(root / "target")
    return t, root


def _model(t, root, flags: dict, seed: int = 0) -> Eagle3DraftModel:
    tc = t.model.config
    tl = LlamaConfig(vocab_size=tc.vocab_size, hidden_size=tc.hidden_size, intermediate_size=2 * tc.hidden_size,
                     num_hidden_layers=1, num_attention_heads=tc.num_attention_heads,
                     num_key_value_heads=tc.num_key_value_heads, max_position_embeddings=1024,
                     rms_norm_eps=tc.rms_norm_eps, rope_theta=getattr(tc, "rope_theta", 10000.0))
    tl._attn_implementation = "eager"  # flex attention's block masks need compile; the eager path is the same math
    cfg = Eagle3SpeculatorConfig(
        transformer_layer_config=tl, draft_vocab_size=tc.vocab_size, eagle_aux_hidden_state_layer_ids=AUX, **flags,
        speculators_config=SpeculatorsConfig(algorithm="eagle3", proposal_methods=[GreedyTokenProposalConfig()],
                                             default_proposal_method="greedy",
                                             verifier=VerifierConfig.from_config(tc, name_or_path=str(root / "target"))))
    torch.manual_seed(seed)
    m = Eagle3DraftModel(cfg)
    m.load_verifier_weights()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight") or ".norm" in name or "layernorm" in name:
                p.mul_(1 + 0.3 * torch.randn(p.shape, generator=g))  # trained-looking norms: their reading matters
    return m


def _features(t, ids: list[int]) -> torch.Tensor:
    t.set_aux_layer_ids(AUX)
    t.reset()
    return t.forward(torch.tensor(ids)).features  # [T, 3 H]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_drifttool_reads_what_speculators_saves(target, variant):
    t, root = target
    m = _model(t, root, VARIANTS[variant]).eval()
    d = to_drafter(m, dt.load_target(root / "target") if hasattr(dt, "load_target") else None)
    ids = prompt(3, 40)
    f = _features(t, ids)
    x_ids, x_f = torch.tensor(ids[1:])[None], f[:-1][None]  # speculators' shift_batch: feature t with token t+1
    got: list[torch.Tensor] = []
    hook = m.lm_head.register_forward_hook(lambda _m, _i, out: got.append(out.detach()))
    with torch.no_grad():
        m(hidden_states=x_f, input_ids=x_ids, document_ids=torch.zeros_like(x_ids),
          position_ids=torch.arange(1, x_ids.shape[1] + 1)[None], ttt_steps=3)
        ours = d.ttt_forward(x_ids, x_f, steps=3)
    hook.remove()
    assert len(got) == 3
    for step, (a, b) in enumerate(zip(got, ours)):
        valid = x_ids.shape[1] - step  # slots whose shifted token exists (speculators pads the rest with id 0)
        torch.testing.assert_close(b.logits[0, :valid], a[0, :valid], rtol=1e-4, atol=1e-4,
                                   msg=lambda s, step=step: f"{variant} step {step}: {s}")


def _batch(t, ids: list[int]) -> dict:
    f = _features(t, ids)
    x = torch.tensor(ids[1:])[None]
    with torch.no_grad():
        t.reset()
        out = t.model(torch.tensor(ids)[None], output_hidden_states=True)
    return {"hidden_states": f[:-1][None], "input_ids": x, "document_ids": torch.zeros_like(x),
            "loss_mask": torch.ones_like(x), "position_ids": torch.arange(1, x.shape[1] + 1)[None],
            "verifier_last_hidden_states": out.hidden_states[-1][:, 1:]}


def test_the_drift_scalars_reach_speculators_metrics_and_equal_an_offline_capture(target, tmp_path):
    t, root = target
    m = _model(t, root, VARIANTS["eagle3"]).train()
    probes = [prompt(11, 20), prompt(12, 24)]
    logger = DriftLogger(root / "target", probes, depth=3, every=2, max_new_tokens=8, series=tmp_path / "series",
                         name="spec")
    trainer = SimpleNamespace(model=m, global_step=0, config=SimpleNamespace(log_freq=2))
    attach_speculators(trainer, logger)
    opt = torch.optim.AdamW(m.parameters(), lr=0.05)
    batch = _batch(t, prompt(5, 32))
    before = m.fc.weight.detach().clone()
    logged = {}
    for step in range(5):
        trainer.global_step = step
        _draft, loss, metrics = m(**batch, ttt_steps=3, loss_config=LOSS)
        if step < 4:  # the last step's forward only: its scalars describe the weights it ran with (saved below)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if step % 2 == 0:  # the trainer's logged steps: what it hands its metric logger
            logged[step] = normalize_counted_metrics({k: v.item() for k, v in metrics.items()}, 1)
        else:
            assert not any(k.startswith("drift/") for k in metrics)
    assert [s for s, _ in logger.history] == [0, 2, 4] and not torch.equal(before, m.fc.weight)  # it trained
    assert logged[0]["drift/acceptance_rate/d1"] != logged[4]["drift/acceptance_rate/d1"] or \
        logged[0]["drift/rms_growth/d3"] != logged[4]["drift/rms_growth/d3"]  # and the logger saw it
    assert all({"drift/acceptance_length", "drift/rms_growth/d3", "drift/recency_ratio/d2", "loss"} <= set(v)
               for v in logged.values())
    m.eval()
    _ = m(**batch, ttt_steps=3, loss_config=LOSS)  # validation calls (eval mode) never evaluate
    assert len(logger.history) == 3
    # offline: the trained weights as speculators saves them, captured by the CLI on the same probes
    m.save_pretrained(tmp_path / "trained")
    want = offline_drift_summary(tmp_path, root / "target", tmp_path / "trained", probes)
    got = logged[4]
    assert sum(math.isfinite(v) for k, v in got.items() if k.startswith("drift/")) >= len(want) - 1
    for k, v in want.items():
        assert (math.isnan(v) and math.isnan(got[k])) or got[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k


def test_a_cadence_the_trainer_would_not_log_is_refused(target):
    t, root = target
    logger = DriftLogger(root / "target", [prompt(1, 12)], depth=2, every=3)
    with pytest.raises(DriftError, match="not a multiple of the trainer's log_freq=2"):
        attach_speculators(SimpleNamespace(model=None, global_step=0, config=SimpleNamespace(log_freq=2)), logger)
    assert callable(wrap_forward)
