"""Start a drafter pair from one of the target's sink layers, so that it attends the target's sink from step 0.

Drafters trained from random weights on a CPU budget never learn the target's attention sink (docs/real_target.md),
so the attention half of the published story (the sink lost to the drafter's own drafts with depth) cannot be asked
of them. Here the drafter's single decoder layer starts as target layer L, reading its own input:

- `fc` is a pass-through of the aux feature that *is* layer L's input (aux ids are layer inputs), so at depth 1
  the drafter's hidden state is the target's residual stream entering layer L;
- q/k/v take that layer's weights on the hidden half of the drafter's input and zeros on the embedding half, so at
  depth 1 the drafter's attention is exactly layer L's attention over the same keys (sink included);
- o_proj, the MLP and its norm are layer L's; `hidden_norm` takes layer L's input norm;
- the final norm starts at weight 1 and lm_head as the target's head (tied embeddings restricted to the draft vocab)
  times the target's final-norm weights, so the logits are the target's.

Both variants get the same weights (EAGLE-3.1's fc_norm starts at 1); attention is scale-free through
`hidden_norm`, so both start with the same depth-1 attention, and — because the output norm's weight is 1 — the
same depth-2 attention too: EAGLE-3 feeds back `pre`, EAGLE-3.1 `pre / rms(pre)`, and `hidden_norm` maps both to
the same vector. An earlier recipe put the target's final-norm weights in the output norm; EAGLE-3.1 then fed back
a state the copied layer never saw and lost the target's sink at depth 2 at initialisation, before training (its
traces are kept in sample_traces/sink_seeds/old_recipe/ as that negative example).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from drifttool.model.drafter import Eagle3Drafter


class SinkInitError(ValueError):
    """A sink layer the target or the drafter cannot provide (one line for the command line)."""


def check_sink_layer(layer: int, num_layers: int, aux_layer_ids: list[int]) -> int:
    """The aux slot whose feature is layer `layer`'s input; one-line error otherwise."""
    if not 0 <= layer < num_layers:
        raise SinkInitError(f"--sink-layer {layer}: the target has layers 0..{num_layers - 1}")
    if layer not in aux_layer_ids:
        raise SinkInitError(f"--sink-layer {layer}: the drafter reads the inputs of layers {aux_layer_ids} only; "
                            f"pick one of them (fc passes that layer's input through) or rebuild the features")
    return aux_layer_ids.index(layer)


def _check_shapes(m: Eagle3Drafter, tcfg: dict) -> None:
    c = m.config
    want = {"hidden_size": tcfg["hidden_size"], "num_attention_heads": tcfg["num_attention_heads"],
            "num_key_value_heads": tcfg["num_key_value_heads"], "intermediate_size": tcfg["intermediate_size"],
            "head_dim": tcfg.get("head_dim") or tcfg["hidden_size"] // tcfg["num_attention_heads"]}
    bad = [f"{k} {getattr(c, k)} vs {v}" for k, v in want.items() if getattr(c, k) != v]
    if bad:
        raise SinkInitError("--sink-layer: the drafter's layer is not the target's shape (" + ", ".join(bad) + ")")


@torch.no_grad()
def init_from_sink_layer(models: dict[str, Eagle3Drafter], target_dir: Path, layer: int) -> dict:
    """Overwrite every drafter's weights in place (see the module doc); returns what was done, for the report."""
    for f in ("config.json", "model.safetensors"):  # one line, not a FileNotFoundError traceback
        if not (target_dir / f).is_file():
            raise SinkInitError(f"--sink-layer: {target_dir / f} missing; the sink init copies the target's layer "
                                "from its config.json and model.safetensors (one file)")
    tcfg = json.loads((target_dir / "config.json").read_text())
    aux_ids = list(next(iter(models.values())).config.aux_layer_ids)
    slot = check_sink_layer(layer, tcfg["num_hidden_layers"], aux_ids)
    p = f"model.layers.{layer}."
    with safe_open(str(target_dir / "model.safetensors"), framework="pt") as h:
        keys = set(h.keys())

        def get(k: str) -> torch.Tensor:
            return h.get_tensor(k).float()

        t = {n: get(p + n) for n in ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                      "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                      "mlp.down_proj.weight", "input_layernorm.weight",
                                      "post_attention_layernorm.weight")}
        norm = get("model.norm.weight")
        head = get("lm_head.weight") if "lm_head.weight" in keys else get("model.embed_tokens.weight")
    for m in models.values():
        _check_shapes(m, tcfg)
        hsz, ht = m.config.hidden_size, m.config.target_hidden_size
        fc = torch.zeros_like(m.fc.weight)
        fc[:, slot * ht:(slot + 1) * ht] = torch.eye(hsz, ht)
        m.fc.weight.copy_(fc)
        lay = m.layers[0]
        for n in ("q_proj", "k_proj", "v_proj"):
            w = getattr(lay.self_attn, n).weight
            w.zero_()
            w[:, hsz:] = t[f"self_attn.{n}.weight"]  # [emb half | hidden half]: the hidden half is layer L's
        lay.self_attn.o_proj.weight.copy_(t["self_attn.o_proj.weight"])
        for n in ("gate_proj", "up_proj", "down_proj"):
            getattr(lay.mlp, n).weight.copy_(t[f"mlp.{n}.weight"])
        lay.hidden_norm.weight.copy_(t["input_layernorm.weight"])
        lay.post_attention_layernorm.weight.copy_(t["post_attention_layernorm.weight"])
        lay.input_layernorm.weight.fill_(1.0)
        # the final norm at weight 1, the target's final-norm weights folded into lm_head: the logits are the
        # target's (lm_head(w * x) = (lm_head * w)(x)), and the state EAGLE-3.1 feeds back, norm(pre), is pre's
        # direction at unit RMS: hidden_norm maps it to exactly what it maps EAGLE-3's fed-back pre to, a state
        # layer L knows (the next layer's input). With the target's weights (-2.1 ... 3.3 on SmolLM2) in the norm,
        # EAGLE-3.1 fed back a state layer L's q/k never saw and lost the sink at depth 2 before any training.
        m.norm.weight.fill_(1.0)
        draft_ids = torch.arange(m.config.draft_vocab_size) + m.d2t.long()
        m.lm_head.weight.copy_(head[draft_ids] * norm[None, :])
    return {"sink_layer": layer, "aux_slot": slot, "aux_layer_ids": aux_ids,
            "recipe": "decoder layer = target layer L on the hidden half (embedding half 0), fc = pass-through of "
                      "layer L's input, output norm at weight 1, lm_head = the target's head x its final-norm "
                      "weights (norm-at-1 recipe)"}
