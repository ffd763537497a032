"""MTP heads read from their target's own checkpoint folder (config.json + safetensors, only the tensors the head
needs), the way vLLM reads them: DeepSeek-V3/R1 and GLM-4.5 (`model.layers.{N+i}.*`, N = num_hidden_layers),
MiMo (`model.mtp_layers.{i}.*`). What vLLM leaves implicit is decided here and written to `assumptions`;
anything else is one DriftError line naming the file and field (docs/mtp.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import torch
from safetensors import SafetensorError, safe_open

from ..errors import DriftError
from .cfgcheck import pos_float, pos_int, strict_bool
from .config import DrafterConfig

# model_type -> the vLLM module that serves its MTP head
FAMILIES = {"deepseek_v3": "deepseek_mtp", "glm4_moe": "glm4_moe_mtp", "mimo": "mimo_mtp"}
# model types whose MTP heads drifttool cannot run, with what is missing
REFUSED = {
    "qwen3_next": "Qwen3-Next MTP heads (mtp.* keys: a gated-attention full layer with zero-centred (1+w) RMSNorm "
                  "over a hybrid gated-delta-net target) are not supported",
    "qwen3_5": "Qwen3.5 MTP heads (mtp.* keys, a gated-delta-net hybrid target) are not supported",
    "deepseek_v32": "DeepSeek-V3.2 MTP heads (sparse attention with a lightning indexer) are not supported",
    "deepseek_v2": "DeepSeek-V2 has no MTP head (softmax-routed MoE; MTP came with DeepSeek-V3)",
}
MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def is_mtp_config(raw: dict[str, Any]) -> bool:
    """A target config that carries MTP layers (or names a family whose MTP heads are refused), and no EAGLE
    drafter markers."""
    if any(k in raw for k in ("speculators_model_type", "eagle_config", "draft_vocab_size")):
        return False
    return raw.get("num_nextn_predict_layers") is not None or raw.get("mtp_num_hidden_layers") is not None \
        or raw.get("model_type") in REFUSED


def _moe(raw: dict[str, Any], where: str, family: str) -> dict[str, Any] | None:
    if raw.get("n_routed_experts") is None:
        return None
    if family == "deepseek_v3":
        scoring, method = raw.get("scoring_func", "sigmoid"), raw.get("topk_method", "noaux_tc")
        if scoring != "sigmoid" or method != "noaux_tc":
            raise DriftError(f"{where}: scoring_func {scoring!r} / topk_method {method!r} unsupported (DeepSeek-V3 "
                             "routes with 'sigmoid' and 'noaux_tc')")
    m = {k: pos_int(raw, k, where) for k in ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size")}
    m["n_shared_experts"] = pos_int(raw, "n_shared_experts", where, default=0, minimum=0)
    m["n_group"] = pos_int(raw, "n_group", where, default=1)
    m["topk_group"] = pos_int(raw, "topk_group", where, default=1)
    m["norm_topk_prob"] = strict_bool(raw.get("norm_topk_prob", True), "norm_topk_prob", where)
    m["routed_scaling_factor"] = pos_float(raw, "routed_scaling_factor", where, 1.0)
    if m["n_routed_experts"] % m["n_group"] or m["topk_group"] > m["n_group"]:
        raise DriftError(f"{where}: n_group {m['n_group']} / topk_group {m['topk_group']} do not divide "
                         f"n_routed_experts {m['n_routed_experts']}")
    return m


MAX_MTP_LAYERS = 64  # released checkpoints have 1 (DeepSeek-V3, GLM-4.5) or 1-3 (MiMo); a count past this is a typo


class _Attention(NamedTuple):
    """The family-specific shape of an MTP block's attention (and its MoE, where it has one)."""

    num_key_value_heads: int
    head_dim: int
    rotary: int
    mla: dict[str, Any] | None = None
    moe: dict[str, Any] | None = None
    qk_norm: bool = False
    bias: bool = False


def _deepseek_v3_attention(raw: dict[str, Any], where: str, nh: int, nkv: int, hd: int) -> _Attention:
    """Latent attention: heads are decompressed per query head, so nkv = nh and head dim = nope + rope."""
    mla = {k: pos_int(raw, k, where, default=None) for k in MLA_FIELDS}  # q_lora_rank may be null
    missing = [k for k in MLA_FIELDS[1:] if mla[k] is None]
    if missing:
        raise DriftError(f"{where}: missing required field {missing[0]!r} (DeepSeek-V3 latent attention)")
    return _Attention(nh, mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"], mla["qk_rope_head_dim"], mla=mla,
                      moe=_moe(raw, where, "deepseek_v3"))


def _glm4_moe_attention(raw: dict[str, Any], where: str, nh: int, nkv: int, hd: int) -> _Attention:
    """GQA with partial rotary (rope_parameters' factor first, as v5 configs write it), optional bias / qk-norm."""
    params = raw.get("rope_parameters") if isinstance(raw.get("rope_parameters"), dict) else {}
    factor = params.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0))
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise DriftError(f"{where}: field 'partial_rotary_factor' is {factor!r}; expected a number in (0, 1]")
    rotary = int(hd * factor)
    bias = strict_bool(raw.get("attention_bias", False), "attention_bias", where)
    qk_norm = strict_bool(raw.get("use_qk_norm", False), "use_qk_norm", where)
    return _Attention(nkv, hd, rotary, moe=_moe(raw, where, "glm4_moe"), qk_norm=qk_norm, bias=bias)


def _mimo_attention(raw: dict[str, Any], where: str, nh: int, nkv: int, hd: int) -> _Attention:
    """A Qwen2 decoder block: q/k/v biases, full rotary, dense (no MoE)."""
    if raw.get("n_routed_experts") is not None:
        raise DriftError(f"{where}: n_routed_experts in a MiMo config: MiMo MTP blocks are dense Qwen2 layers")
    return _Attention(nkv, hd, hd, bias=True)


# model_type -> how that family's MTP block attends (one row per key of FAMILIES)
ATTENTION = {"deepseek_v3": _deepseek_v3_attention, "glm4_moe": _glm4_moe_attention, "mimo": _mimo_attention}


def _mtp_family(raw: dict[str, Any], where: str) -> str:
    """The model type, refused with what is missing, or named unknown, unless drifttool runs its MTP heads."""
    family = raw.get("model_type")
    if family in REFUSED:
        raise DriftError(f"{where}: model_type {family!r}: {REFUSED[family]}; supported MTP families: "
                         f"{', '.join(FAMILIES)}")
    if family not in FAMILIES:
        raise DriftError(f"{where}: model_type {family!r} with num_nextn_predict_layers: unknown MTP family "
                         f"(supported: {', '.join(FAMILIES)})")
    return family


def _mtp_layer_count(raw: dict[str, Any], where: str) -> int:
    """num_nextn_predict_layers, bounded before anything is built per layer (10**12 built a list of that length)."""
    n = pos_int(raw, "num_nextn_predict_layers", where, minimum=0)
    if n == 0:
        raise DriftError(f"{where}: num_nextn_predict_layers is 0: this checkpoint has no MTP layers")
    if n > MAX_MTP_LAYERS:
        raise DriftError(f"{where}: num_nextn_predict_layers is {n}; expected at most {MAX_MTP_LAYERS} (released MTP "
                         "checkpoints have 1-3)")
    return n


def _moe_layers(raw: dict[str, Any], where: str, moe: dict[str, Any] | None, layers: int, n: int) -> list[bool]:
    """Which MTP blocks are MoE: vLLM builds block i as decoder layer N+i, MoE where that index is past the
    dense layers (first_k_dense_replace) and on the MoE stride (moe_layer_freq)."""
    first_dense = pos_int(raw, "first_k_dense_replace", where, default=0, minimum=0)
    freq = pos_int(raw, "moe_layer_freq", where, default=1)
    return [moe is not None and layers + i >= first_dense and (layers + i) % freq == 0 for i in range(n)]


def _feedback_assumptions(assumptions: dict[str, str], n: int, norm_output: bool) -> None:
    """What vLLM leaves implicit about the state fed back between draft steps, recorded."""
    assumptions["mtp_feedback"] = ("post-norm (final_layernorm output, as MiMo's layer returns it)" if norm_output
                                   else "pre-norm (the block output before shared_head.norm, as vLLM feeds it back)")
    assumptions["mtp_first_hidden"] = "the target's last hidden state after its final norm (what vLLM's target returns)"
    if n > 1:
        assumptions["mtp_layers"] = (f"{n} MTP layers; every draft step runs the first (vLLM's proposer passes no "
                                     "spec_step_idx, so spec_step_idx % num_mtp_layers is 0)")


def mtp_config(raw: dict[str, Any], path: Path) -> DrafterConfig:
    """The target's config.json -> the DrafterConfig of its MTP head."""
    from .ckpt_config import _rope

    where = str(path / "config.json")
    family = _mtp_family(raw, where)
    n = _mtp_layer_count(raw, where)
    assumptions: dict[str, str] = {}
    h = pos_int(raw, "hidden_size", where)
    nh = pos_int(raw, "num_attention_heads", where)
    nkv = pos_int(raw, "num_key_value_heads", where, default=nh)
    layers = pos_int(raw, "num_hidden_layers", where)
    hd = pos_int(raw, "head_dim", where, default=h // nh)
    if str(raw.get("hidden_act", "silu")) not in ("silu", "swish"):
        raise DriftError(f"{where}: hidden_act {raw.get('hidden_act')!r} unsupported (expected silu)")
    theta, scaling, rope_src = _rope(raw, where)
    assumptions["rope"] = f"from {rope_src}"
    att = ATTENTION[family](raw, where, nh, nkv, hd)
    if att.rotary % 2:
        raise DriftError(f"{where}: rotary dimension {att.rotary} is odd; RoPE rotates pairs of dimensions")
    moe_layers = _moe_layers(raw, where, att.moe, layers, n)
    norm_output = family == "mimo"  # MiMo's layer ends in final_layernorm: the normed state is fed back
    _feedback_assumptions(assumptions, n, norm_output)
    vocab = pos_int(raw, "vocab_size", where)
    mtp = {"family": family, "vllm_module": FAMILIES[family], "num_layers": n, "start": layers,
           "order": "hidden_first" if family == "mimo" else "embed_first", "attention_bias": att.bias,
           "rotary_dim": att.rotary, "moe": att.moe, "moe_layers": moe_layers,
           "tie_word_embeddings": strict_bool(raw.get("tie_word_embeddings", False), "tie_word_embeddings", where)}
    return DrafterConfig(
        hidden_size=h, num_attention_heads=nh, num_key_value_heads=att.num_key_value_heads, head_dim=att.head_dim,
        intermediate_size=pos_int(raw, "intermediate_size", where), vocab_size=vocab, draft_vocab_size=vocab,
        target_hidden_size=h, aux_layer_ids=[], rms_norm_eps=pos_float(raw, "rms_norm_eps", where, 1e-6),
        rope_theta=theta, rope_scaling=scaling,
        max_position_embeddings=pos_int(raw, "max_position_embeddings", where, default=2048),
        model_type=family, qk_norm=att.qk_norm, mla=att.mla, use_aux_hidden_state=False, norm_output=norm_output,
        layout=FAMILIES[family], assumptions=assumptions, source=str(path), mtp=mtp,
    )


# MiMo's names for the parts DeepSeek names enorm / hnorm / eh_proj / shared_head.norm
MIMO_RENAMES = (("token_layernorm.", "enorm."), ("hidden_layernorm.", "hnorm."), ("input_proj.", "eh_proj."),
                ("final_layernorm.", "shared_head.norm."))


def _files(path: Path) -> list[Path]:
    files = sorted(path.glob("*.safetensors"))
    if not files:
        pickles = sorted([*path.glob("*.bin"), *path.glob("*.pt"), *path.glob("*.pth")])
        if pickles:
            raise DriftError(f"{pickles[0]}: MTP heads are read from safetensors only (unpickling can execute "
                             "arbitrary code); convert the checkpoint to safetensors")
        raise DriftError(f"{path}: no *.safetensors weights found")
    return files


def module_key(key: str, m: dict[str, Any]) -> str | None:
    """A checkpoint tensor name -> the MTPDrafter's name, or None when the head does not read it."""
    if key in ("model.embed_tokens.weight", "lm_head.weight"):
        return "target." + key
    if m["family"] == "mimo":
        if not key.startswith("model.mtp_layers."):
            return None
        i, _, rest = key[len("model.mtp_layers."):].partition(".")
        for old, new in MIMO_RENAMES:
            if rest.startswith(old):
                rest = new + rest[len(old):]
        return f"layers.{i}.{rest}" if i.isdigit() else None
    if not key.startswith("model.layers."):
        return None
    i, _, rest = key[len("model.layers."):].partition(".")
    if not i.isdigit() or not 0 <= int(i) - m["start"] < m["num_layers"]:
        return None
    j = int(i) - m["start"]
    return f"embed.{j}" if rest == "embed_tokens.weight" else f"layers.{j}.{rest}"


def read_mtp_weights(path: Path, cfg: DrafterConfig) -> dict[str, torch.Tensor]:
    """Only the head's tensors (module names), plus the target's embeddings / lm_head as `target.*`."""
    out: dict[str, torch.Tensor] = {}
    for f in _files(path):
        try:
            with safe_open(str(f), "pt") as st:
                for k in st.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
                    name = module_key(k, cfg.mtp)
                    if name is None:
                        continue
                    if name in out:
                        raise DriftError(f"{f}: tensor {k!r} is given twice; a tensor may be given once")
                    out[name] = st.get_tensor(k)
        except (SafetensorError, OSError) as e:
            raise DriftError(f"{f}: corrupt safetensors file ({(str(e).splitlines() or [''])[0]})") from None
    return out


def _shared(cfg: DrafterConfig, sd: dict[str, torch.Tensor], p: Path) -> None:
    """Embeddings and head: the MTP layer's own when it has them, else the target's (recorded)."""
    m, a = cfg.mtp, cfg.assumptions
    own = sd.pop("embed.0", None)
    for j in range(1, m["num_layers"]):  # vLLM loads the first MTP layer's embeddings only (they are shared)
        sd.pop(f"embed.{j}", None)
    target_emb = sd.pop("target.model.embed_tokens.weight", None)
    target_head = sd.pop("target.lm_head.weight", None)
    if own is not None:
        sd["embed_tokens.weight"] = own
    elif target_emb is not None:
        sd["embed_tokens.weight"] = target_emb
        cfg.has_embed = False
        a["embed_tokens"] = "the target's model.embed_tokens (the MTP layer has none)"
    else:
        raise DriftError(f"{p}: no embeddings for the MTP head (neither model.layers.{m['start']}.embed_tokens.weight "
                         "nor model.embed_tokens.weight)")
    for j in range(m["num_layers"]):
        key = f"layers.{j}.shared_head.head.weight"
        if key in sd:
            continue
        head = target_emb if m["tie_word_embeddings"] and target_head is None else target_head
        if head is None:
            raise DriftError(f"{p}: no head for MTP layer {m['start'] + j} (neither its shared_head.head.weight nor "
                             "the target's lm_head.weight)")
        sd[key] = head
        a["lm_head"] = "the target's lm_head" + (" (tied: its embeddings)" if head is target_emb else "") + \
            (" (MiMo shares it)" if m["family"] == "mimo" else " (the MTP layer has no shared_head.head)")


def read_mtp_drafter(path: Path, raw: dict[str, Any], overrides: dict[str, Any] | None,
                     device: str | torch.device, dtype: torch.dtype):
    """The MTP head of the target checkpoint at `path`, validated tensor by tensor against the module's shapes."""
    from .ckpt_config import parse_override
    from .mtp import MTPDrafter

    cfg = mtp_config(raw, path)
    for k, v in (overrides or {}).items():
        if k not in ("norm_output", "trained_window"):
            raise DriftError(f"--override {k}: not an MTP head setting (an MTP head takes norm_output=true|false: "
                             "feed back the normed state or not; trained_window=N)")
        val = parse_override(k, v)
        cfg.overrides[k] = {"checkpoint": getattr(cfg, k), "override": val}
        setattr(cfg, k, val)
    sd = read_mtp_weights(path, cfg)
    _shared(cfg, sd, path)
    with torch.device("meta"):
        want = {k: tuple(v.shape) for k, v in MTPDrafter(cfg).state_dict().items() if k != "d2t"}
    where = f"{path} ({cfg.mtp['vllm_module']} layout)"
    for k, shape in want.items():
        if k not in sd:
            raise DriftError(f"{where}: missing tensor {_ckpt_name(k, cfg)!r} (expected shape {list(shape)})")
        if tuple(sd[k].shape) != shape:
            raise DriftError(f"{where}: tensor {_ckpt_name(k, cfg)!r} has shape {list(sd[k].shape)}, expected "
                             f"{list(shape)} from config.json")
        if not sd[k].is_floating_point() or not torch.isfinite(sd[k].float()).all():
            raise DriftError(f"{where}: tensor {_ckpt_name(k, cfg)!r} is not finite floating point")
    extra = sorted(set(sd) - set(want))
    if extra:
        raise DriftError(f"{where}: unexpected tensor {_ckpt_name(extra[0], cfg)!r} for this config "
                         f"({len(extra)} unexpected in all)")
    model = MTPDrafter(cfg)
    model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
    return model.to(device=device, dtype=dtype).eval()


def _ckpt_name(key: str, cfg: DrafterConfig) -> str:
    """A module name back in the checkpoint's spelling, for error lines."""
    m = cfg.mtp
    if key == "embed_tokens.weight":
        return "model.embed_tokens.weight"
    if not key.startswith("layers."):
        return key
    j, _, rest = key[len("layers."):].partition(".")
    if m["family"] == "mimo":
        for old, new in MIMO_RENAMES:
            if rest.startswith(new):
                rest = old + rest[len(new):]
        return f"model.mtp_layers.{j}.{rest}"
    return f"model.layers.{m['start'] + int(j)}.{rest}"

