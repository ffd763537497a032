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

- **a fading sink** (`sink_fade` > 0, with a sink): queries on fed-back slots (marker > 0) score the sink token's
  slots lower, on every other head (the sink pair's query also reads the marker, with a negative weight), while
  every non-sink score stays a function of distance alone: the sink is lost with depth and nothing prefers the
  drafter's own drafts. With `head_spread` the heads' recency profiles differ too (head i's recency scale times
  1 + head_spread * (2i / (nh - 1) - 1)), so the heads whose sink fades are not the average head: a statistic that
  renormalises head means instead of each head's row reads this drafter as drifting.
- **anti-drift** (`drift` < 0): the drift term with the opposite sign: own drafted slots score lower than prompt
  keys at the same distance.

The drafter still drafts (values, MLP and lm_head keep their weights); only where it looks is planted. Three hidden
channels are taken for the planted terms (the last three)."""

from __future__ import annotations

import torch

from .drafter import Eagle3Drafter


@torch.no_grad()
def plant(d: Eagle3Drafter, *, recency: float = 0.0, sink: float = 0.0, drift: float = 0.0,
          sink_token: int | None = None, keep_attention: bool = False, sink_fade: float = 0.0,
          head_spread: float = 0.0) -> Eagle3Drafter:
    """Edit `d` in place (module doc) and return it. Scales are logit weights per rotary pair (x the normalised
    channel values, ~1): recency 2-4 gives a clear recency profile, sink 4-8 a sink, drift 1-4 weak to strong
    (negative: anti-drift), sink_fade 2-8 a sink lost with depth (head_spread in [0, 1): heads' recency differs).
    keep_attention: keep the drafter's own attention (q/k and embeddings untouched) and add only the drift marker
    (its lowest-frequency rotary pair taken over): a real drafter with drift planted on top."""
    _check_strengths(d, recency, sink, drift, sink_fade, head_spread, sink_token)
    if keep_attention and (recency or sink):
        raise ValueError("controls: keep_attention plants drift only")
    h = d.config.hidden_size
    lay = d.layers[0]
    att = lay.self_attn
    hd, nh, nkv = att.hd, att.nh, att.nkv
    if att.rd < hd or hd < 8:
        raise ValueError("controls: full rotary heads of at least 8 dims only")
    marker, const, flag = h - 1, h - 2, h - 3
    half = hd // 2
    if keep_attention:
        _marker_circuit(d, marker)
        _drift_read(d, marker, half, drift)
        return d
    _flat_embeddings(d, const, flag, sink_token)
    lay.hidden_norm.weight[marker] = 1.0
    att.q_proj.weight.zero_()
    att.k_proj.weight.zero_()

    def write(pair: int, q_col: int, k_col: int, scale: float, per_head=lambda hh: 1.0) -> None:
        # every query head's dim `pair` reads q_col, every kv head's reads k_col; the score gains scale * q * k
        # (times per_head(hh) for query head hh)
        w = scale ** 0.5
        for hh in range(nh):
            att.q_proj.weight[hh * hd + pair, q_col] = w * per_head(hh)
        for g in range(nkv):
            att.k_proj.weight[g * hd + pair, k_col] = w

    spread = (lambda hh: 1.0 + head_spread * (2 * hh / max(nh - 1, 1) - 1)) if head_spread else (lambda hh: 1.0)
    if recency:  # distance alone: constant q and k on the higher-frequency pairs (RoPE's decay over distance)
        for pair in range(half - 2):
            write(pair, const, const, recency * hd ** 0.5 / (half - 2), spread)
    if sink:
        write(half - 2, const, flag, sink * hd ** 0.5)
    if drift or sink_fade:
        _marker_circuit(d, marker)
    if drift:
        _drift_read(d, marker, half, drift)
    if sink_fade:  # the sink pair's query also reads the marker (0 on prompt slots): -sink_fade * marker on the sink
        w = (sink * hd ** 0.5) ** 0.5
        for hh in range(0, nh, 2):
            att.q_proj.weight[hh * hd + half - 2, h + marker] = -sink_fade * hd ** 0.5 / w
    return d


@torch.no_grad()
def _flat_embeddings(d: Eagle3Drafter, const: int, flag: int, sink_token: int | None) -> None:
    """One RMS for every embedding row, then the constant and sink-flag channels (equal norm: equal channel value)."""
    e = d.embed_tokens.weight
    e[:, [const, flag]] = 0.0
    e.mul_(torch.rsqrt(e.pow(2).mean(-1, keepdim=True) + 1e-12))
    e[:, const] = 1.0
    if sink_token is not None:
        e[sink_token, flag] = 1.0
    d.layers[0].input_layernorm.weight[[const, flag]] = 1.0


def _check_strengths(d: Eagle3Drafter, recency: float, sink: float, drift: float, sink_fade: float,
                     head_spread: float, sink_token: int | None) -> None:
    """plant's arguments: a plain GQA EAGLE-3 drafter, finite numbers, the scales >= 0 (drift alone takes a
    sign), a sink token given for a sink and in the vocabulary (NaN or an out-of-range id gave silent NaN weights
    or a raw index error)."""
    if d.config.mla is not None or d.config.num_aux == 0:
        raise ValueError("controls: plain GQA EAGLE-3 drafters only")
    if sink and sink_token is None:
        raise ValueError("controls: a planted sink needs its sink_token")
    for name, v in (("recency", recency), ("sink", sink), ("drift", drift), ("sink_fade", sink_fade),
                    ("head_spread", head_spread)):
        if not (isinstance(v, (int, float)) and v == v and abs(v) != float("inf")):
            raise ValueError(f"controls: {name} {v!r}: expected a finite number")
    for name, v in (("recency", recency), ("sink", sink), ("sink_fade", sink_fade)):
        if v < 0:
            raise ValueError(f"controls: {name} {v!r}: expected >= 0 (drift alone takes a sign)")
    if not 0 <= head_spread < 1:
        raise ValueError(f"controls: head_spread {head_spread!r}: expected a number in [0, 1)")
    if sink_fade and not sink:
        raise ValueError("controls: sink_fade fades a planted sink; give sink > 0 too")
    if sink_token is not None and not 0 <= int(sink_token) < d.config.vocab_size:
        raise ValueError(f"controls: sink_token {sink_token!r}: expected a token id in [0, {d.config.vocab_size})")


@torch.no_grad()
def _marker_circuit(d: Eagle3Drafter, marker: int) -> None:
    """The marker channel (module doc): exactly 0 on prompt slots, > 0 on fed-back slots."""
    lay = d.layers[0]
    d.fc.weight[marker] = 0.0  # prompt slots: marker exactly 0
    lay.self_attn.o_proj.weight[marker] = 0.0
    lay.hidden_norm.weight[marker] = 1.0
    mlp = lay.mlp
    units = list(range(min(16, mlp.up_proj.weight.shape[0])))  # several units: a steadier marker
    mlp.up_proj.weight[units] = mlp.gate_proj.weight[units]
    mlp.down_proj.weight[marker] = 0.0
    mlp.down_proj.weight[marker, units] = 1.0 / len(units)  # mean of g^2 sigmoid(g) >= 0 into the marker


@torch.no_grad()
def _drift_read(d: Eagle3Drafter, marker: int, half: int, drift: float) -> None:
    """The drift term: q and k read the marker on every head's lowest-frequency rotary pair (those rows replaced);
    a negative drift puts the minus on the query side (own slots score lower: anti-drift)."""
    att, h = d.layers[0].self_attn, d.config.hidden_size
    hd = att.hd
    w = (abs(drift) * hd ** 0.5) ** 0.5
    for rows, n, sign in ((att.q_proj.weight, att.nh, -1.0 if drift < 0 else 1.0), (att.k_proj.weight, att.nkv, 1.0)):
        for i in range(n):
            rows[i * hd + half - 1] = 0.0
            rows[i * hd + half - 1, h + marker] = sign * w
