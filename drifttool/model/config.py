"""The one normalised drafter description every checkpoint layout is reduced to."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import DriftError
from . import flags as flag_table

# The drafter flags, in the order conform tries them and the manifest lists them (declared in model/flags.py; a
# user may override any of them at load time, the "what-if" questions).
FLAG_NAMES = flag_table.names()
# How eagle_aux_hidden_state_layer_ids are read. "input": id i = the input of target layer i = HF
# hidden_states[i] (vLLM; i = L is the last layer's output before the final norm). "output": id i = the output
# of layer i (ModelOpt / SpecForge hooks, SGLang's explicit ids), i.e. input-convention id i + 1.
AUX_CONVENTIONS = ("input", "output")
# Target feature id of the final hidden state after the last norm: what vLLM feeds an EAGLE drafter whose
# eagle_config says use_aux_hidden_state: false.
FINAL_HIDDEN = -1


@dataclass
class DrafterConfig:
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int  # target vocabulary (input ids live here)
    draft_vocab_size: int
    target_hidden_size: int
    aux_layer_ids: list[int]
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    # The context length the drafter was trained at, when its config says so (drifttool's `trained_window` key)
    # or the user does (override trained_window=N). None: see trained_window() for the fallbacks.
    trained_window: int | None = None
    hidden_act: str = "silu"
    sliding_window: int | None = None  # draft-layer attention window in positions (None: full context)
    qk_norm: bool = False  # Qwen3 draft layer: per-head RMSNorm on q and k before RoPE
    model_type: str = "llama"  # the draft layer's family: llama | qwen3
    aux_convention: str = "input"  # see AUX_CONVENTIONS; aux_layer_ids are as the checkpoint writes them
    # DeepSeek-style multi-head latent attention (Kimi K2.x EAGLE-3.1): q_lora_rank (None: plain q_proj),
    # kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim. None: ordinary attention.
    mla: dict[str, Any] | None = None
    use_aux_hidden_state: bool = True  # False: no fc; the drafter reads the target's final (normed) hidden state
    fc_norm: bool = False
    norm_before_fc: bool = False
    norm_output: bool = False
    norm_before_residual: bool = False
    has_embed: bool = True
    # Flags of model/flags.py without a field of their own above (read with flag(name)); empty for the four
    # EAGLE flags.
    extra_flags: dict[str, bool] = field(default_factory=dict)
    # A multi-token-prediction head read from its target's checkpoint (mtp.py / mtp_checkpoint.py): family, its
    # layers, concatenation order, attention and MoE fields, which layer each draft step runs. None: EAGLE-3.
    mtp: dict[str, Any] | None = None
    # provenance: what the loader saw and decided
    layout: str = "unknown"
    overrides: dict[str, Any] = field(default_factory=dict)
    assumptions: dict[str, str] = field(default_factory=dict)
    source: str = ""

    @property
    def num_aux(self) -> int:
        """Feature chunks fc reads (0: no fc, features pass through)."""
        return len(self.aux_layer_ids) if self.use_aux_hidden_state else 0

    @property
    def rope_dim(self) -> int:
        """Dimensions RoPE rotates per head: all of head_dim, or MLA's qk_rope_head_dim."""
        return int(self.mla["qk_rope_head_dim"]) if self.mla else self.head_dim

    @property
    def input_aux_layer_ids(self) -> list[int]:
        """The aux ids in the input convention (what the target wrapper hooks: inputs of layers 0..L)."""
        if not self.use_aux_hidden_state:
            return [FINAL_HIDDEN]
        shift = 1 if self.aux_convention == "output" else 0
        return [i + shift for i in self.aux_layer_ids]

    @property
    def variant(self) -> str:
        """EAGLE-3.1 = a feature norm (per-chunk fc_norm, or speculators' default single norm_before_fc) plus
        post-norm feedback; neither = EAGLE-3; anything else mixed is a what-if. An MTP head is `mtp` (its
        what-if overrides are recorded under `overrides`)."""
        if self.mtp:
            return "mtp"
        if self.norm_output and (self.fc_norm or self.norm_before_fc):
            return "eagle3.1"
        if not self.fc_norm and not self.norm_output:
            return "eagle3"
        return "eagle3-mixed"

    def flag(self, name: str) -> bool:
        """A flag's value, whether it has a field of its own or lives in extra_flags."""
        if name in self.extra_flags:
            return bool(self.extra_flags[name])
        return bool(getattr(self, name, False))

    def flags(self) -> dict[str, bool]:
        """Every flag of the table (read at call time, so a flag declared later is listed)."""
        return {k: self.flag(k) for k in flag_table.names()}

    def with_flags(self, values: dict[str, bool]) -> dict[str, Any]:
        """dataclasses.replace keyword arguments setting `values`: fields where a flag has one, else extra_flags."""
        kw = split_flags({k: bool(v) for k, v in values.items()})
        return {**kw, "extra_flags": {**self.extra_flags, **kw["extra_flags"]}}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def weights_hash_fields(self) -> dict[str, Any]:
        d = self.to_dict()
        for k in ("overrides", "assumptions", "source"):
            d.pop(k)
        if d["trained_window"] is None:  # added later: hashes of drafters that do not set it stay as they were
            d.pop("trained_window")
        if d["mtp"] is None:  # likewise: EAGLE drafters hash as before MTP heads existed
            d.pop("mtp")
        if not d["extra_flags"]:  # likewise: drafters with only the four EAGLE flags hash as before
            d.pop("extra_flags")
        return d

    def config_hash(self) -> str:
        blob = json.dumps(self.weights_hash_fields(), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def _length(v: Any, key: str) -> int | None:
    """A context length from a config or manifest: None, or a positive integer (never a bool, float or string:
    `true` read as 1 made every round 'beyond')."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        from ..errors import DriftError

        raise DriftError(f"field {key!r} is {v!r}; expected a positive integer number of tokens")
    return v


def trained_window(drafter: dict[str, Any]) -> dict[str, Any]:
    """The context length a drafter was trained at, from its config or manifest entry, with where it came from.

    In order: an explicit `trained_window` (config key or override), `rope_scaling.original_max_position_embeddings`
    (the length before a RoPE extension), else `max_position_embeddings`, which is only an *assumption*: drafters
    are often trained far shorter than the position range their config allows (the bundled SmolLM2 drafters:
    4096 of 8192), so `assumed` is True and reports say so."""
    rs = drafter.get("rope_scaling") or {}
    explicit = _length(drafter.get("trained_window"), "trained_window")
    mpe = _length(drafter.get("max_position_embeddings"), "max_position_embeddings")
    orig = _length(rs.get("original_max_position_embeddings") if isinstance(rs, dict) else None,
                   "rope_scaling.original_max_position_embeddings")
    if explicit:
        window, src, assumed = int(explicit), "trained_window", False
    elif orig:
        window, src, assumed = int(orig), "rope_scaling.original_max_position_embeddings", False
    elif mpe:
        window, src, assumed = int(mpe), "max_position_embeddings (assumed: the config does not say how long the " \
            "drafter was trained; give --trained-window)", True
    else:
        window, src, assumed = None, "unknown (using the trace's beyond_window column)", True
    return {"max_position_embeddings": int(mpe) if mpe else None,
            "original_max_position_embeddings": int(orig) if orig else None, "window": window, "source": src,
            "assumed": assumed}


FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(DrafterConfig))


def split_flags(values: dict[str, bool]) -> dict[str, Any]:
    """DrafterConfig keyword arguments for flag values: a flag with a field of its own by name, the rest in
    extra_flags."""
    own = {k: v for k, v in values.items() if k in FIELD_NAMES}
    return {**own, "extra_flags": {k: v for k, v in values.items() if k not in FIELD_NAMES}}


# Non-flag overrides: key -> DrafterConfig attribute.
OTHER_OVERRIDES = {"aux_ids": "aux_layer_ids", "aux_convention": "aux_convention", "sliding_window": "sliding_window",
                   "trained_window": "trained_window"}


def check_override_key(key: str, where: str = "--override") -> None:
    """An override's key is a known one, else one line naming where it was given, with the nearest known key."""
    import difflib

    known = [*flag_table.names(), *OTHER_OVERRIDES]
    if key in known:
        return
    near = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {near[0]}?" if near else ""
    raise DriftError(f"{where} {key}: unknown key{hint} (expected one of {', '.join(known)})")
