"""Constructed drafters of known truth: the controls a drift verdict must get right before it counts.

These are edits of a real EAGLE-3 / EAGLE-3.1 drafter, not trained models. Its attention scores are replaced by
three planted terms (q and k projections zeroed, then a few rank-1 rows written), each on one rotary pair of every
head, so that what the attention depends on is known exactly:

- **recency** (`recency` > 0): q and k read one channel that is the same for every token (the drafter's embedding
  rows are rescaled to one RMS and a constant channel is set), on the higher-frequency rotary pairs; the scores are
  then a function of key distance alone (RoPE), peaked at distance 0: a drafter that favours recent keys and cannot
  tell a drafted key from a prompt key. `recency=0` with the other terms 0: **uniform** attention.
- **sink** (`sink` > 0): the query's constant channel against a key channel set only in the embedding of
  `sink_token`: every query adds the same score on that token's slots (a planted attention sink, position-free on the
  second-lowest rotary pair, whose rotation over a few hundred keys is negligible).
- **drift** (`drift` > 0): a marker channel that is exactly 0 on every prompt slot (fc's row zeroed) and positive on
  every fed-back slot (MLP units with gate = up, so each output g^2 sigmoid(g) >= 0, written into the marker; the
  fed-back state carries it to the next depth, EAGLE-3 accumulating it), read by q and k on the lowest-frequency
  pair: queries at depth >= 2 score their own drafted slots higher, prompt keys not at all. Attention moves from
  the sink (and the prompt) onto its own slots with depth: drift by construction.

The drafter still drafts (values, MLP and lm_head keep their weights); only where it looks is planted. Three hidden
channels are taken for the planted terms (the last three)."""

from __future__ import annotations

import torch

from .drafter import Eagle3Drafter


@torch.no_grad()
def plant(d: Eagle3Drafter, *, recency: float = 0.0, sink: float = 0.0, drift: float = 0.0,
          sink_token: int | None = None, keep_attention: bool = False) -> Eagle3Drafter:
    """Edit `d` in place (module doc) and return it. Scales are logit weights per rotary pair (x the normalised
    channel values, ~1): recency 2-4 gives a clear recency profile, sink 4-8 a sink, drift 1-4 weak to strong.
    keep_attention: keep the drafter's own attention (q/k and embeddings untouched) and add only the drift marker
    (its lowest-frequency rotary pair taken over): a real drafter with drift planted on top."""
    cfg = d.config
    if cfg.mla is not None or cfg.num_aux == 0:
        raise ValueError("controls: plain GQA EAGLE-3 drafters only")
    if sink and sink_token is None:
        raise ValueError("controls: a planted sink needs its sink_token")
    if keep_attention and (recency or sink):
        raise ValueError("controls: keep_attention plants drift only")
    h = cfg.hidden_size
    lay = d.layers[0]
    att = lay.self_attn
    hd, nh, nkv = att.hd, att.nh, att.nkv
    if att.rd < hd or hd < 8:
        raise ValueError("controls: full rotary heads of at least 8 dims only")
    marker, const, flag = h - 1, h - 2, h - 3
    half = hd // 2
    if keep_attention:
        _marker(d, marker, half, drift)
        return d
    # one RMS for every embedding row, then the constant and sink-flag channels (equal norm: equal channel value)
    e = d.embed_tokens.weight
    e[:, [const, flag]] = 0.0
    e.mul_(torch.rsqrt(e.pow(2).mean(-1, keepdim=True) + 1e-12))
    e[:, const] = 1.0
    if sink_token is not None:
        e[sink_token, flag] = 1.0
    lay.input_layernorm.weight[[const, flag]] = 1.0
    lay.hidden_norm.weight[marker] = 1.0
    att.q_proj.weight.zero_()
    att.k_proj.weight.zero_()

    def write(pair: int, q_col: int, k_col: int, scale: float) -> None:
        # every query head's dim `pair` reads q_col, every kv head's reads k_col; the score gains scale * q * k
        w = scale ** 0.5
        for hh in range(nh):
            att.q_proj.weight[hh * hd + pair, q_col] = w
        for g in range(nkv):
            att.k_proj.weight[g * hd + pair, k_col] = w

    if recency:  # distance alone: constant q and k on the higher-frequency pairs (RoPE's decay over distance)
        for pair in range(half - 2):
            write(pair, const, const, recency * hd ** 0.5 / (half - 2))
    if sink:
        write(half - 2, const, flag, sink * hd ** 0.5)
    if drift:
        _marker(d, marker, half, drift)
    return d


@torch.no_grad()
def _marker(d: Eagle3Drafter, marker: int, half: int, drift: float) -> None:
    """The drift term (module doc): marker channel 0 on prompt slots, > 0 on fed-back slots, read by q and k on
    every head's lowest-frequency rotary pair (those q/k rows replaced)."""
    lay, h = d.layers[0], d.config.hidden_size
    att = lay.self_attn
    hd = att.hd
    d.fc.weight[marker] = 0.0  # prompt slots: marker exactly 0
    att.o_proj.weight[marker] = 0.0
    lay.hidden_norm.weight[marker] = 1.0
    mlp = lay.mlp
    units = list(range(min(16, mlp.up_proj.weight.shape[0])))  # several units: a steadier marker
    mlp.up_proj.weight[units] = mlp.gate_proj.weight[units]
    mlp.down_proj.weight[marker] = 0.0
    mlp.down_proj.weight[marker, units] = 1.0 / len(units)  # mean of g^2 sigmoid(g) >= 0 into the marker
    w = (drift * hd ** 0.5) ** 0.5
    for rows, n in ((att.q_proj.weight, att.nh), (att.k_proj.weight, att.nkv)):
        for i in range(n):
            rows[i * hd + half - 1] = 0.0
            rows[i * hd + half - 1, h + marker] = w
