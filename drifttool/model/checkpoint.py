"""Detect a drafter checkpoint's layout, normalise its config, validate every tensor, build the module.

Layouts: SafeAILab EAGLE-3, speculators/vLLM, SpecForge, NVIDIA `eagle_config` (config reading: ckpt_config);
Llama, Qwen3 or MLA draft layers.
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

from ..dtypes import parse_dtype
from ..errors import DriftError
from ..jsonfile import read_json_object
from .ckpt_config import (  # noqa: F401 - detect_layout re-exported (the vLLM engine imports it from here)
    OTHER_OVERRIDES,
    check_conflicts,
    detect_layout,
    normalise_config,
    parse_override,
)
from .config import DrafterConfig
from .drafter import Eagle3Drafter
from .target import Target, load_target


def _read_json(path: Path) -> dict[str, Any]:
    return read_json_object(path, "a drafter checkpoint folder needs config.json")


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
    seen: dict[str, Path] = {}
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
            key = _canonical(k)
            if key in out:
                raise DriftError(f"{f}: tensor {k!r} is also in {seen[key].name} (as {key!r}); a tensor may be given "
                                 "once (which copy is meant?)")
            out[key], seen[key] = v, f
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
        uniq, counts = torch.unique(tgt, return_counts=True)
        if len(uniq) < len(tgt):
            tok = int(uniq[counts > 1][0])
            ids = (tgt == tok).nonzero()[:, 0].tolist()
            raise DriftError(f"{path}: 'd2t' maps draft ids {ids[:3]} all to target token {tok}; a draft vocabulary "
                             "maps one-to-one into the target's")


def load_drafter(
    path,
    target: Target | str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str = torch.float32,
) -> Eagle3Drafter:
    """Load any supported layout; `overrides` (flag -> bool) answer what-if questions and are recorded.
    `path` may be a hub id (`org/name`) found in the local Hugging Face cache (see hub.py)."""
    from .hub import resolve

    p = resolve(path, "drafter")
    if not p.is_dir():
        raise DriftError(f"{p}: drafter folder does not exist")
    dtype = parse_dtype(dtype)
    if target is not None and not isinstance(target, Target):
        target = load_target(target, device=device, dtype=dtype)
    raw = _read_json(p / "config.json")
    cfg = normalise_config(raw, p, target)
    check_conflicts(cfg, str(p / "config.json"))
    for k, v in (overrides or {}).items():
        val = parse_override(k, v)
        attr = OTHER_OVERRIDES.get(k, k)
        cfg.overrides[k] = {"checkpoint": getattr(cfg, attr), "override": val}
        setattr(cfg, attr, val)
    check_conflicts(cfg, "--override")
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
    extra = {"trained_window": cfg.trained_window} if cfg.trained_window else {}  # drifttool's key; engines ignore it
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
    (out / "config.json").write_text(json.dumps(conf | extra, indent=2))
    return out
