"""Detect a drafter checkpoint's layout, normalise its config, validate every tensor, build the module.

Layouts: SafeAILab EAGLE-3, speculators/vLLM, SpecForge, NVIDIA `eagle_config`; Llama or Qwen3 draft layers.
Weights: safetensors, or a `pytorch_model.bin` read weights-only (tensors only, as transformers reads it);
other pickle files are refused. Where a config is silent, vLLM's reading is taken and recorded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .config import AUX_CONVENTIONS, FLAG_NAMES, DrafterConfig
from .drafter import Eagle3Drafter
from .dtypes import parse_dtype
from .errors import DriftError
from .jsonfile import read_json_object
from .target import Target, default_aux_layer_ids, load_target

LAYOUTS = ("speculators", "safeailab", "specforge", "nvidia")
MODEL_TYPES = ("llama", "qwen3")
MLA_TYPES = ("deepseek_v3", "deepseek_v2", "kimi_k2")  # draft layers with multi-head latent attention
MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def _read_json(path: Path) -> dict[str, Any]:
    return read_json_object(path, "a drafter checkpoint folder needs config.json")


def detect_layout(cfg: dict[str, Any], keys: set[str] | None = None) -> str:
    """Which public layout a config.json belongs to."""
    if cfg.get("speculators_model_type") is not None:
        if cfg["speculators_model_type"] != "eagle3":
            raise DriftError(
                f"config.json: speculators_model_type is {cfg['speculators_model_type']!r}; drifttool supports 'eagle3'"
            )
        return "speculators"
    if isinstance(cfg.get("eagle_config"), dict):
        return "nvidia"
    archs = cfg.get("architectures") or []
    looks_llama = "hidden_size" in cfg and "num_attention_heads" in cfg
    if looks_llama and ("fc_norm" in cfg or "norm_output" in cfg):
        return "specforge"
    if any("Eagle3" in a for a in archs) or (looks_llama and "draft_vocab_size" in cfg):
        return "safeailab"
    raise DriftError(
        "config.json: unknown drafter layout (expected speculators_model_type 'eagle3', an eagle_config block, "
        "or a Llama config with draft_vocab_size / architectures LlamaForCausalLMEagle3)"
    )


def _rope(layer: dict[str, Any], where: Path) -> tuple[float, dict | None, str]:
    """rope_theta / rope_scaling (v4) or rope_parameters (v5); the draft config's own values."""
    params = layer.get("rope_parameters")
    if isinstance(params, dict):
        theta = float(params.get("rope_theta", layer.get("rope_theta", 10000.0)))
        kind = params.get("rope_type", "default")
        scaling = None if kind == "default" else {k: v for k, v in params.items() if k != "rope_theta"}
        return theta, scaling, "rope_parameters"
    if "rope_theta" in layer:
        return float(layer["rope_theta"]), layer.get("rope_scaling"), "rope_theta"
    return 10000.0, layer.get("rope_scaling"), "absent (default 10000)"


def _need(d: dict[str, Any], key: str, where: str) -> Any:
    if key not in d or d[key] is None:
        raise DriftError(f"{where}: missing required field {key!r}")
    return d[key]


def _window(layer: dict[str, Any], where: str, assumptions: dict[str, str]) -> int | None:
    """The draft layer's attention window as vLLM resolves it: `sliding_window` applies only when
    `layer_types[0]` is "sliding_attention" (speculators writes both; 0 or null means none)."""
    types, size = layer.get("layer_types"), layer.get("sliding_window")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise DriftError(f"{where}: sliding_window {size!r} is not a non-negative integer")
    if isinstance(types, list) and types:
        if types[0] != "sliding_attention":
            assumptions["sliding_window"] = f"layer_types[0] is {types[0]!r}: full attention"
            return None
        if not size:
            assumptions["sliding_window"] = "layer_types[0] is 'sliding_attention' but sliding_window is unset: none"
            return None
        return int(size)
    if size:
        assumptions["sliding_window"] = (f"sliding_window {size} without layer_types: not applied (vLLM windows a "
                                         "draft layer only when layer_types marks it 'sliding_attention')")
    return None


def _use_aux(raw: dict[str, Any], assumptions: dict[str, str]) -> bool:
    """vLLM reads use_aux_hidden_state from eagle_config only (absent: true); a top-level one is honoured too,
    and that is recorded."""
    eagle = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    if eagle.get("use_aux_hidden_state") is not None:
        val = bool(eagle["use_aux_hidden_state"])
    elif raw.get("use_aux_hidden_state") is not None:
        val = bool(raw["use_aux_hidden_state"])
        assumptions["use_aux_hidden_state"] = f"{val} from the top level (vLLM reads it inside eagle_config only)"
    else:
        return True
    if not val:
        assumptions["use_aux_hidden_state"] = ("false: no fc; the drafter reads the target's final hidden state "
                                               "after its last norm (what vLLM passes)")
    return val


def _flags(layout: str, top: dict, layer: dict, eagle: dict, assumptions: dict[str, str]) -> dict[str, bool]:
    """The four EAGLE flags as vLLM reads them. speculators: top level only (vLLM ignores copies inside
    transformer_layer_config), norm_before_residual defaulting to true; other layouts: the flat config
    (NVIDIA's eagle_config first for norm_before_fc), every flag defaulting to false."""
    out = {}
    for name in FLAG_NAMES:
        default = layout == "speculators" and name == "norm_before_residual"
        srcs = (top,) if layout == "speculators" else ((eagle, top) if name == "norm_before_fc" else (top,))
        val = next((bool(src[name]) for src in srcs if src.get(name) is not None), None)
        if name == "fc_norm" and not val and top.get("use_aux_norm"):  # SGLang's legacy name for fc_norm
            val = True
            assumptions["fc_norm"] = "from use_aux_norm (the legacy name SGLang reads as fc_norm)"
        if val is None:
            val = default
            assumptions[name] = f"absent: {str(default).lower()} (as vLLM reads a {layout} config)"
        if layout == "speculators" and layer.get(name) is not None and bool(layer[name]) != val:
            assumptions[name] = (f"{val} from the top level; transformer_layer_config's {name}={layer[name]} is "
                                 "ignored, as vLLM ignores it")
        out[name] = val
    return out


def normalise_config(raw: dict[str, Any], path: Path, target: Target | None) -> DrafterConfig:
    layout = detect_layout(raw)
    where = str(path / "config.json")
    assumptions: dict[str, str] = {}
    if layout == "speculators":
        layer = raw.get("transformer_layer_config")
        if not isinstance(layer, dict):
            raise DriftError(f"{where}: missing required field 'transformer_layer_config' (a Llama config)")
        top = raw
        layer_where = f"{where}: transformer_layer_config"
    else:
        layer, top, layer_where = raw, raw, where
    eagle = raw.get("eagle_config") if layout == "nvidia" else {}
    model_type = str(layer.get("model_type") or "llama")
    if model_type not in MODEL_TYPES + MLA_TYPES:
        raise DriftError(f"{layer_where}: model_type {model_type!r} unsupported (expected one of "
                         f"{', '.join(MODEL_TYPES + MLA_TYPES)})")
    if layer.get("attention_bias"):
        raise DriftError(f"{layer_where}: attention_bias true is unsupported (EAGLE-3 draft layers have no biases)")
    h = int(_need(layer, "hidden_size", layer_where))
    nh = int(_need(layer, "num_attention_heads", layer_where))
    nkv = int(layer.get("num_key_value_heads") or nh)
    hd = int(layer.get("head_dim") or h // nh)
    mla = None
    if model_type in MLA_TYPES:  # heads are decompressed per query head: nkv = nh, head dim = nope + rope
        mla = {k: layer.get(k) for k in MLA_FIELDS}
        for k in MLA_FIELDS[1:]:
            _need(layer, k, layer_where)
        nkv, hd = nh, int(mla["qk_nope_head_dim"]) + int(mla["qk_rope_head_dim"])
    inter = int(_need(layer, "intermediate_size", layer_where))
    vocab = int(_need(layer, "vocab_size", layer_where))
    dvocab = int(top.get("draft_vocab_size") or layer.get("draft_vocab_size") or vocab)
    ht = top.get("target_hidden_size") or layer.get("target_hidden_size")
    if ht is None:
        # SafeAILab/vLLM size fc from hidden_size when target_hidden_size is absent; a target of another
        # width is then reported by _check_target rather than as an fc.weight shape mismatch.
        ht = h
        assumptions["target_hidden_size"] = f"absent: drafter hidden_size {h}"
    ht = int(ht)
    if nh % nkv:
        raise DriftError(f"{layer_where}: num_attention_heads {nh} is not a multiple of num_key_value_heads {nkv}")
    aux = top.get("eagle_aux_hidden_state_layer_ids") or (eagle or {}).get("eagle_aux_hidden_state_layer_ids")
    use_aux = _use_aux(raw, assumptions)
    if not use_aux:
        aux = []
        if ht != h:
            raise DriftError(f"{where}: use_aux_hidden_state false needs target_hidden_size == hidden_size "
                             f"(got {ht} and {h}): the target's hidden state enters the layer without fc")
    if aux is None:
        if target is None:
            raise DriftError(
                f"{where}: no eagle_aux_hidden_state_layer_ids and no target given to derive the default [2, L//2, L-3]"
            )
        aux = default_aux_layer_ids(target.num_layers)
        assumptions["aux_layer_ids"] = f"absent: vLLM default {aux} for a {target.num_layers}-layer target"
    theta, scaling, rope_src = _rope(layer, path)
    assumptions["rope"] = f"from {rope_src}"
    cfg = DrafterConfig(
        hidden_size=h, num_attention_heads=nh, num_key_value_heads=nkv, head_dim=hd, intermediate_size=inter,
        vocab_size=vocab, draft_vocab_size=dvocab, target_hidden_size=ht, aux_layer_ids=[int(i) for i in aux],
        rms_norm_eps=float(layer.get("rms_norm_eps", 1e-6)), rope_theta=theta, rope_scaling=scaling,
        max_position_embeddings=int(layer.get("max_position_embeddings", 2048)),
        hidden_act=str(layer.get("hidden_act", "silu")),
        sliding_window=_window(layer, layer_where, assumptions), model_type=model_type,
        qk_norm=model_type == "qwen3", mla=mla, use_aux_hidden_state=use_aux,
        **_flags(layout, top, layer, eagle or {}, assumptions),
        layout=layout, assumptions=assumptions, source=str(path),
    )
    if cfg.hidden_act not in ("silu", "swish"):
        raise DriftError(f"{layer_where}: hidden_act {cfg.hidden_act!r} unsupported (expected silu)")
    if layout == "specforge" and cfg.norm_output:
        assumptions["specforge_norm_output"] = (
            "trusted config; SpecForge checkpoints trained before PR #879 fed back pre-norm hidden "
            "despite norm_output: true (override norm_output=false to test that)"
        )
    return cfg


def _check_conflicts(cfg: DrafterConfig, where: str) -> None:
    if cfg.fc_norm and cfg.norm_before_fc:
        raise DriftError(f"{where}: fc_norm and norm_before_fc are mutually exclusive (set at most one)")


# Non-flag overrides: key -> DrafterConfig attribute.
OTHER_OVERRIDES = {"aux_ids": "aux_layer_ids", "aux_convention": "aux_convention", "sliding_window": "sliding_window"}


def _parse_override(key: str, value: Any) -> Any:
    """One `--override key=value`: a flag (true/false), aux_ids (comma-separated layer ids), aux_convention
    (input|output) or sliding_window (a positive integer, or none)."""
    if key not in FLAG_NAMES and key not in OTHER_OVERRIDES:
        raise DriftError(f"--override {key}: unknown key; expected one of {', '.join([*FLAG_NAMES, *OTHER_OVERRIDES])}")
    s = str(value).strip().lower()
    if key == "aux_ids":
        try:
            ids = [int(x) for x in (value if isinstance(value, (list, tuple)) else s.split(","))]
        except ValueError:
            raise DriftError(f"--override aux_ids={value}: expected comma-separated layer ids, e.g. 1,23,44") from None
        if not ids or min(ids) < 0:
            raise DriftError(f"--override aux_ids={value}: expected non-negative layer ids")
        return ids
    if key == "aux_convention":
        if s not in AUX_CONVENTIONS:
            raise DriftError(f"--override aux_convention={value}: expected {' or '.join(AUX_CONVENTIONS)}")
        return s
    if key == "sliding_window":
        if s in ("none", "0", "off"):
            return None
        if not s.isdigit():
            raise DriftError(f"--override sliding_window={value}: expected a positive integer or none")
        return int(s)
    if isinstance(value, bool):
        return value
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise DriftError(f"--override {key}={value}: expected true or false")


def expected_shapes(cfg: DrafterConfig) -> dict[str, tuple[int, ...]]:
    h, ht, a = cfg.hidden_size, cfg.target_hidden_size, cfg.num_aux
    qd, kvd = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    s = {
        "fc.weight": (h, a * ht),
        "layers.0.input_layernorm.weight": (h,),
        "layers.0.hidden_norm.weight": (h,),
        "layers.0.self_attn.q_proj.weight": (qd, 2 * h),
        "layers.0.self_attn.k_proj.weight": (kvd, 2 * h),
        "layers.0.self_attn.v_proj.weight": (kvd, 2 * h),
        "layers.0.self_attn.o_proj.weight": (h, qd),
        "layers.0.post_attention_layernorm.weight": (h,),
        "layers.0.mlp.gate_proj.weight": (cfg.intermediate_size, h),
        "layers.0.mlp.up_proj.weight": (cfg.intermediate_size, h),
        "layers.0.mlp.down_proj.weight": (h, cfg.intermediate_size),
        "norm.weight": (h,),
        "lm_head.weight": (cfg.draft_vocab_size, h),
        "embed_tokens.weight": (cfg.vocab_size, h),
        "d2t": (cfg.draft_vocab_size,),
        "t2d": (cfg.vocab_size,),
    }
    if not a:
        del s["fc.weight"]
    if cfg.mla:
        from .mla import mla_shapes

        for k in ("q_proj", "k_proj", "v_proj", "o_proj"):
            del s[f"layers.0.self_attn.{k}.weight"]
        s.update(mla_shapes(cfg))
    if cfg.qk_norm:
        s["layers.0.self_attn.q_norm.weight"] = (cfg.head_dim,)
        s["layers.0.self_attn.k_norm.weight"] = (cfg.head_dim,)
    if cfg.norm_before_fc:
        s["input_norm.weight"] = (a * ht,)
    if cfg.fc_norm:
        for i in range(a):
            s[f"fc_norm.{i}.weight"] = (ht,)
    return s


OPTIONAL = {"embed_tokens.weight", "d2t", "t2d", "lm_head.weight", "norm.weight"}


def _canonical(key: str) -> str:
    for p in ("model.", "draft_model."):
        if key.startswith(p):
            key = key[len(p):]
    if key.startswith("midlayer."):
        key = "layers.0." + key[len("midlayer."):]
    for legacy in ("aux_norm.", "aux_norms."):  # SGLang's legacy name for the per-chunk fc_norm
        if key.startswith(legacy):
            key = "fc_norm." + key[len(legacy):]
    return key


def _load_bin(f: Path) -> dict[str, torch.Tensor]:
    """A PyTorch `.bin` state dict read the way transformers reads one: torch.load(weights_only=True), which
    rebuilds tensors and plain containers only and refuses any other object (no arbitrary code runs)."""
    try:
        part = torch.load(str(f), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - UnpicklingError, RuntimeError (not a zip / truncated), EOFError...
        raise DriftError(f"{f}: cannot read as a weights-only PyTorch state dict ({type(e).__name__}: "
                         f"{(str(e).splitlines() or [''])[0][:160]}); drifttool never unpickles arbitrary "
                         "objects. Convert it to safetensors") from None
    if not isinstance(part, dict) or not all(isinstance(v, torch.Tensor) for v in part.values()):
        raise DriftError(f"{f}: not a state dict of tensors (expected {{name: tensor}})")
    return part


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """*.safetensors, else *.bin (weights-only torch.load, as transformers does); other pickles refused."""
    files = sorted(path.glob("*.safetensors"))
    bins = [] if files else sorted(path.glob("*.bin"))
    if not files and not bins:
        pickles = sorted([*path.glob("*.pt"), *path.glob("*.pth")])
        if pickles:
            raise DriftError(
                f"{pickles[0]}: pickle checkpoint refused; unpickling can execute arbitrary code. Convert it to "
                "safetensors (e.g. safetensors.torch.save_file on a state dict you trust) and retry"
            )
        raise DriftError(f"{path}: no *.safetensors (or pytorch_model.bin) weights found")
    out: dict[str, torch.Tensor] = {}
    for f in files or bins:
        if f.stat().st_size == 0:
            raise DriftError(f"{f}: empty file (expected {'safetensors' if files else 'PyTorch'} weights)")
        if f.suffix == ".bin":
            part = _load_bin(f)
        else:
            try:
                part = load_file(str(f))
            except (SafetensorError, OSError, ValueError, RuntimeError) as e:
                raise DriftError(f"{f}: corrupt safetensors file ({str(e).splitlines()[0]})") from None
        for k, v in part.items():
            out[_canonical(k)] = v
    return out


def validate(cfg: DrafterConfig, sd: dict[str, torch.Tensor], path: Path) -> None:
    want = expected_shapes(cfg)
    for k, shape in want.items():
        if k not in sd:
            if k in OPTIONAL:
                continue
            if k.startswith("fc_norm.") and "fc_norm" in cfg.overrides:
                continue
            if k == "input_norm.weight" and "norm_before_fc" in cfg.overrides:
                continue
            raise DriftError(f"{path}: missing tensor {k!r} (expected shape {list(shape)})")
        if tuple(sd[k].shape) != shape:
            raise DriftError(f"{path}: tensor {k!r} has shape {list(sd[k].shape)}, expected {list(shape)} from config")
    for k, v in sd.items():
        if k == "d2t" and v.dtype not in (torch.int64, torch.int32):
            raise DriftError(f"{path}: tensor 'd2t' has dtype {v.dtype}, expected int64")
        elif k == "t2d" and v.dtype not in (torch.bool, torch.uint8, torch.int64):
            raise DriftError(f"{path}: tensor 't2d' has dtype {v.dtype}, expected bool")
        elif k not in ("d2t", "t2d") and k in want and not v.is_floating_point():
            raise DriftError(f"{path}: tensor {k!r} has dtype {v.dtype}, expected a floating-point dtype")
        elif k in want and v.is_floating_point() and not torch.isfinite(v).all():
            raise DriftError(f"{path}: tensor {k!r} contains NaN or inf")
    unknown = sorted(k for k in sd if k not in want and not k.startswith(("fc_norm.", "input_norm.")))
    if unknown:
        raise DriftError(f"{path}: unexpected tensor {unknown[0]!r} for this config ({len(unknown)} unexpected in all)")
    if cfg.draft_vocab_size != cfg.vocab_size and "d2t" not in sd:
        raise DriftError(f"{path}: draft_vocab_size {cfg.draft_vocab_size} != vocab_size {cfg.vocab_size} but no 'd2t' tensor")
    if "d2t" in sd:
        tgt = torch.arange(cfg.draft_vocab_size) + sd["d2t"].long()
        if tgt.min() < 0 or tgt.max() >= cfg.vocab_size:
            raise DriftError(f"{path}: 'd2t' maps draft ids outside the target vocabulary [0, {cfg.vocab_size})")


def load_drafter(
    path,
    target: Target | str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str = torch.float32,
) -> Eagle3Drafter:
    """Load any supported layout; `overrides` (flag -> bool) answer what-if questions and are recorded."""
    p = Path(path)
    if not p.is_dir():
        raise DriftError(f"{p}: drafter folder does not exist")
    dtype = parse_dtype(dtype)
    if target is not None and not isinstance(target, Target):
        target = load_target(target, device=device, dtype=dtype)
    raw = _read_json(p / "config.json")
    cfg = normalise_config(raw, p, target)
    _check_conflicts(cfg, str(p / "config.json"))
    for k, v in (overrides or {}).items():
        val = _parse_override(k, v)
        attr = OTHER_OVERRIDES.get(k, k)
        cfg.overrides[k] = {"checkpoint": getattr(cfg, attr), "override": val}
        setattr(cfg, attr, val)
    _check_conflicts(cfg, "--override")
    sd = read_weights(p)
    validate(cfg, sd, p)
    if target is not None:
        _check_target(cfg, target, p)
        target.set_aux_layer_ids(cfg.input_aux_layer_ids)
    model = Eagle3Drafter(cfg)
    if "embed_tokens.weight" not in sd:
        if target is None:
            raise DriftError(f"{p}: checkpoint has no embed_tokens.weight; pass target=... to take the target's embeddings")
        emb = target.input_embeddings()
        if tuple(emb.shape) != (cfg.vocab_size, cfg.hidden_size):
            raise DriftError(
                f"{p}: checkpoint has no embed_tokens.weight and the target's embeddings have shape "
                f"{list(emb.shape)}, expected {[cfg.vocab_size, cfg.hidden_size]} (drafter hidden_size)"
            )
        sd["embed_tokens.weight"] = emb.detach().to("cpu", torch.float32)
        cfg.has_embed = False
    _fill_head(cfg, sd, target, p)
    if "d2t" in sd:
        sd["d2t"] = sd["d2t"].long()
    sd.pop("t2d", None)
    missing, unexpected = model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in sd.items()}, strict=False)
    missing = [m for m in missing if not m.startswith(("fc_norm.", "input_norm.")) and m != "d2t"]
    if missing or unexpected:
        raise DriftError(f"{p}: cannot map weights onto the drafter (missing {missing[:3]}, unexpected {unexpected[:3]})")
    return model.to(device=device, dtype=dtype).eval()


def _fill_head(cfg: DrafterConfig, sd: dict[str, torch.Tensor], target: Target | None, p: Path) -> None:
    """A head without lm_head takes the target's (vLLM shares it, whatever tie_word_embeddings says); one
    without a final-norm weight keeps the RMSNorm with unit weights (vLLM's initial value)."""
    if "lm_head.weight" not in sd:
        head = target.output_embeddings() if target is not None else None
        want = (cfg.draft_vocab_size, cfg.hidden_size)
        if head is None or tuple(head.shape) != want:
            got = "no target given" if head is None else f"the target's lm_head has shape {list(head.shape)}"
            raise DriftError(f"{p}: checkpoint has no lm_head.weight and {got}; expected {list(want)}")
        sd["lm_head.weight"] = head.detach().to("cpu", torch.float32)
        cfg.assumptions["lm_head"] = "absent: the target's lm_head (as vLLM shares it)"
    if "norm.weight" not in sd:
        sd["norm.weight"] = torch.ones(cfg.hidden_size)
        cfg.assumptions["norm"] = "absent: final RMSNorm with unit weights"


def _check_target(cfg: DrafterConfig, target: Target, p: Path) -> None:
    if cfg.target_hidden_size != target.hidden_size:
        raise DriftError(
            f"{p / 'config.json'}: target_hidden_size {cfg.target_hidden_size} != the target's hidden_size {target.hidden_size}"
        )
    if cfg.vocab_size != target.vocab_size:
        raise DriftError(f"{p / 'config.json'}: vocab_size {cfg.vocab_size} != the target's vocabulary {target.vocab_size}")


def save_drafter(model: Eagle3Drafter, out_dir, layout: str = "speculators") -> Path:
    """Write a checkpoint in a real public layout (speculators/vLLM by default; also safeailab, specforge)."""
    cfg = model.config
    if not cfg.use_aux_hidden_state:
        raise DriftError("save_drafter: a drafter without aux features (use_aux_hidden_state false) cannot be "
                         "written in these layouts; use its original folder")
    if cfg.mla:
        raise DriftError("save_drafter: an MLA draft layer cannot be written in these layouts (speculators and "
                         "SpecForge configs describe Llama/Qwen3 layers); use its original folder")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items() if k != "d2t"}
    sd["d2t"] = model.d2t.detach().cpu().long()
    t2d = torch.zeros(cfg.vocab_size, dtype=torch.bool)
    t2d[model.draft_to_target(torch.arange(cfg.draft_vocab_size, device=model.d2t.device)).cpu()] = True
    sd["t2d"] = t2d
    llama = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": cfg.hidden_size,
        "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim, "intermediate_size": cfg.intermediate_size, "vocab_size": cfg.vocab_size,
        "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta, "rope_scaling": cfg.rope_scaling,
        "max_position_embeddings": cfg.max_position_embeddings, "hidden_act": cfg.hidden_act,
        "num_hidden_layers": 1, "tie_word_embeddings": False,
    }
    if cfg.model_type == "qwen3":
        llama.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3")
    if cfg.sliding_window is not None:  # as speculators writes it, and vLLM reads it
        llama.update(sliding_window=cfg.sliding_window, use_sliding_window=True, layer_types=["sliding_attention"])
    aux_ids = cfg.input_aux_layer_ids  # written in the input convention: what vLLM (and a reload) reads
    if layout == "speculators":
        if cfg.draft_vocab_size == cfg.vocab_size and not sd["d2t"].any():
            # Full-vocab drafter with the identity mapping: speculators omits d2t/t2d, and vLLM (0.32) refuses
            # a d2t tensor when draft_vocab_size == vocab_size (it has no draft_id_to_target_id parameter then).
            sd.pop("d2t")
            sd.pop("t2d")
        conf = {
            "architectures": ["Eagle3DraftModel"], "speculators_model_type": "eagle3",
            "transformer_layer_config": llama, "draft_vocab_size": cfg.draft_vocab_size,
            "target_hidden_size": cfg.target_hidden_size,
            "eagle_aux_hidden_state_layer_ids": aux_ids,
            "norm_before_residual": cfg.norm_before_residual, "norm_before_fc": cfg.norm_before_fc,
            "fc_norm": cfg.fc_norm, "norm_output": cfg.norm_output,
            "speculators_config": {
                "algorithm": "eagle3",
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                "default_proposal_method": "greedy",
                "verifier": {"name_or_path": None, "architectures": ["LlamaForCausalLM"]},
            },
        }
    elif layout in ("safeailab", "specforge"):
        if layout == "safeailab" and (cfg.fc_norm or cfg.norm_output):
            raise DriftError("layout 'safeailab' cannot express fc_norm / norm_output (EAGLE-3.1); save as specforge or speculators")
        sd = {("midlayer." + k[len("layers.0."):] if k.startswith("layers.0.") else k): v for k, v in sd.items()}
        if not cfg.has_embed:  # the target's embeddings: these layouts take them from the target
            sd.pop("embed_tokens.weight", None)
        conf = dict(llama, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=cfg.draft_vocab_size)
        if cfg.target_hidden_size != cfg.hidden_size:
            conf["target_hidden_size"] = cfg.target_hidden_size
        # Written although these layouts usually leave them implicit: without them a reload would silently
        # fall back to the default aux layers [2, L//2, L-3] and norm_before_residual/norm_before_fc false.
        conf.update(eagle_aux_hidden_state_layer_ids=aux_ids,
                    norm_before_residual=cfg.norm_before_residual, norm_before_fc=cfg.norm_before_fc)
        if layout == "specforge":
            conf.update(fc_norm=cfg.fc_norm, norm_output=cfg.norm_output)
    else:
        raise DriftError(f"layout {layout!r}: can save speculators, safeailab or specforge")
    save_file(sd, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(conf, indent=2))
    return out
