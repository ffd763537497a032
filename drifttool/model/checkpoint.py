"""Read a drafter checkpoint (any layout in layouts.LAYOUTS), validate every tensor against the module's own
shapes, build the drafter; write one back in a public layout.

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
from . import flags as flag_table
from .ckpt_config import check_conflicts, normalise_config, parse_override
from .config import OTHER_OVERRIDES, DrafterConfig
from .drafter import DrafterBase, Eagle3Drafter
from .layouts import BY_NAME, canonical_key, detect_layout, savable  # noqa: F401 - detect_layout re-exported
from .mtp_checkpoint import is_mtp_config, read_mtp_drafter
from .target import Target, TargetShape, check_aux_ids, load_target


def _read_json(path: Path) -> dict[str, Any]:
    return read_json_object(path, "a drafter checkpoint folder needs config.json")


def expected_shapes(cfg: DrafterConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a checkpoint for `cfg` may hold, with its shape: the drafter module's own state dict
    (built on the meta device: no memory, no initialisation), plus the `t2d` mask checkpoints carry."""
    with torch.device("meta"):
        model = Eagle3Drafter(cfg)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    shapes["t2d"] = (cfg.vocab_size,)
    return shapes


OPTIONAL = {"embed_tokens.weight", "d2t", "t2d", "lm_head.weight", "norm.weight"}


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
            key = canonical_key(k)
            if key in out:
                raise DriftError(f"{f}: tensor {k!r} is also in {seen[key].name} (as {key!r}); a tensor may be given "
                                 "once (which copy is meant?)")
            out[key], seen[key] = v, f
    return out


# the index tensors, which are not floating point: name -> (the dtypes read, the dtype the error line expects)
INDEX_DTYPES = {"d2t": ((torch.int64, torch.int32), "int64"), "t2d": ((torch.bool, torch.uint8, torch.int64), "bool")}


def _unit_norm_allowed(cfg: DrafterConfig, key: str) -> bool:
    """A norm weight an override turned on may be absent: that norm runs with unit weights (recorded)."""
    return any(f.weights and key.startswith(f.weights) and f.name in cfg.overrides for f in flag_table.FLAGS)


def _check_shapes(cfg: DrafterConfig, sd: dict[str, torch.Tensor], want: dict[str, tuple[int, ...]],
                  path: Path) -> None:
    """Every tensor the module needs is there (optional ones aside), each with the shape config.json implies."""
    for k, shape in want.items():
        if k not in sd:
            if k in OPTIONAL or _unit_norm_allowed(cfg, k):
                continue
            raise DriftError(f"{path}: missing tensor {k!r} (expected shape {list(shape)})")
        if tuple(sd[k].shape) != shape:
            raise DriftError(f"{path}: tensor {k!r} has shape {list(sd[k].shape)}, expected {list(shape)} from config")


def _check_dtypes(sd: dict[str, torch.Tensor], want: dict[str, tuple[int, ...]], path: Path) -> None:
    """Index tensors hold integers (or a mask); every other known tensor is finite floating point."""
    for k, v in sd.items():
        if k in INDEX_DTYPES:
            allowed, name = INDEX_DTYPES[k]
            if v.dtype not in allowed:
                raise DriftError(f"{path}: tensor {k!r} has dtype {v.dtype}, expected {name}")
        elif k in want and not v.is_floating_point():
            raise DriftError(f"{path}: tensor {k!r} has dtype {v.dtype}, expected a floating-point dtype")
        elif k in want and not torch.isfinite(v).all():
            raise DriftError(f"{path}: tensor {k!r} contains NaN or inf")


def _check_vocab_map(cfg: DrafterConfig, sd: dict[str, torch.Tensor], path: Path) -> None:
    """A reduced draft vocabulary needs `d2t`, and `d2t` maps it one-to-one into the target vocabulary."""
    if cfg.draft_vocab_size != cfg.vocab_size and "d2t" not in sd:
        raise DriftError(f"{path}: draft_vocab_size {cfg.draft_vocab_size} != vocab_size {cfg.vocab_size} but no 'd2t' tensor")
    if "d2t" not in sd:
        return
    tgt = torch.arange(cfg.draft_vocab_size) + sd["d2t"].long()
    if tgt.min() < 0 or tgt.max() >= cfg.vocab_size:
        raise DriftError(f"{path}: 'd2t' maps draft ids outside the target vocabulary [0, {cfg.vocab_size})")
    uniq, counts = torch.unique(tgt, return_counts=True)
    if len(uniq) < len(tgt):
        tok = int(uniq[counts > 1][0])
        ids = (tgt == tok).nonzero()[:, 0].tolist()
        raise DriftError(f"{path}: 'd2t' maps draft ids {ids[:3]} all to target token {tok}; a draft vocabulary "
                         "maps one-to-one into the target's")


def validate(cfg: DrafterConfig, sd: dict[str, torch.Tensor], path: Path) -> None:
    want = expected_shapes(cfg)
    _check_shapes(cfg, sd, want, path)
    _check_dtypes(sd, want, path)
    unknown = sorted(k for k in sd if k not in want and not k.startswith(flag_table.weight_prefixes()))
    if unknown:
        raise DriftError(f"{path}: unexpected tensor {unknown[0]!r} for this config ({len(unknown)} unexpected in all)")
    _check_vocab_map(cfg, sd, path)


def load_drafter(
    path,
    target: Target | str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str = torch.float32,
) -> Eagle3Drafter:
    """Load any supported layout and point `target` (a Target, or a folder to load) at the drafter's aux
    layers; `overrides` (flag -> bool) answer what-if questions and are recorded. `path` may be a hub id
    (`org/name`) found in the local Hugging Face cache (see hub.py)."""
    from .hub import resolve

    p = resolve(path, "drafter")
    if not p.is_dir():
        raise DriftError(f"{p}: drafter folder does not exist")
    dtype = parse_dtype(dtype)
    if target is not None and not isinstance(target, Target):
        target = load_target(target, device=device, dtype=dtype)
    model = read_drafter(p, target.shape() if target is not None else None, overrides, device, dtype)
    if target is not None:
        target.set_aux_layer_ids(model.config.input_aux_layer_ids)
    return model


def read_drafter(
    path,
    shape: TargetShape | None = None,
    overrides: dict[str, Any] | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str = torch.float32,
) -> DrafterBase:
    """A drafter checkpoint checked against the target's shape only; the target is not touched (the caller
    sets its aux layers: `target.set_aux_layer_ids(model.config.input_aux_layer_ids)`). A target folder whose
    config.json carries MTP layers gives its MTP head (an MTPDrafter, mtp.py)."""
    from .hub import resolve

    p = resolve(path, "drafter")
    if not p.is_dir():
        raise DriftError(f"{p}: drafter folder does not exist")
    dtype = parse_dtype(dtype)
    raw = _read_json(p / "config.json")
    if is_mtp_config(raw):  # a target folder: its own multi-token-prediction head (mtp_checkpoint.py)
        model = read_mtp_drafter(p, raw, overrides, device, dtype)
        if shape is not None:
            _check_target(model.config, shape, p)
        return model
    cfg = normalise_config(raw, p, shape)
    check_conflicts(cfg, str(p / "config.json"))
    _apply_overrides(cfg, overrides)
    check_conflicts(cfg, "--override")
    sd = read_weights(p)
    validate(cfg, sd, p)
    if shape is not None:
        _check_target(cfg, shape, p)
        check_aux_ids(cfg.input_aux_layer_ids, shape.num_layers)
    model = Eagle3Drafter(cfg)
    _fill_embeddings(cfg, sd, shape, p)
    _fill_head(cfg, sd, shape, p)
    _load_weights(model, sd, p)
    return model.to(device=device, dtype=dtype).eval()


def _apply_overrides(cfg: DrafterConfig, overrides: dict[str, Any] | None) -> None:
    """Each `--override` set on the config, with the checkpoint's own value kept beside it (reports show both)."""
    for k, v in (overrides or {}).items():
        val = parse_override(k, v)
        if k in OTHER_OVERRIDES:
            attr = OTHER_OVERRIDES[k]
            cfg.overrides[k] = {"checkpoint": getattr(cfg, attr), "override": val}
            setattr(cfg, attr, val)
        else:  # a flag: its own field, or extra_flags for a flag declared without one
            cfg.overrides[k] = {"checkpoint": cfg.flag(k), "override": val}
            for attr, v2 in cfg.with_flags({k: val}).items():
                setattr(cfg, attr, v2)


def _fill_embeddings(cfg: DrafterConfig, sd: dict[str, torch.Tensor], shape: TargetShape | None, p: Path) -> None:
    """A checkpoint without embed_tokens takes the target's input embeddings, which must match the drafter's
    vocabulary and width."""
    if "embed_tokens.weight" in sd:
        return
    if shape is None or shape.input_embeddings is None:
        raise DriftError(f"{p}: checkpoint has no embed_tokens.weight; pass target=... to take the target's embeddings")
    emb = shape.input_embeddings()
    if tuple(emb.shape) != (cfg.vocab_size, cfg.hidden_size):
        raise DriftError(
            f"{p}: checkpoint has no embed_tokens.weight and the target's embeddings have shape "
            f"{list(emb.shape)}, expected {[cfg.vocab_size, cfg.hidden_size]} (drafter hidden_size)"
        )
    sd["embed_tokens.weight"] = emb.detach().to("cpu", torch.float32)
    cfg.has_embed = False


def _load_weights(model: Eagle3Drafter, sd: dict[str, torch.Tensor], p: Path) -> None:
    """The validated tensors onto the module (float32; d2t as int64; the t2d mask is not a module tensor)."""
    if "d2t" in sd:
        sd["d2t"] = sd["d2t"].long()
    sd.pop("t2d", None)
    missing, unexpected = model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in sd.items()}, strict=False)
    missing = [m for m in missing if not m.startswith(flag_table.weight_prefixes()) and m != "d2t"]
    if missing or unexpected:
        raise DriftError(f"{p}: cannot map weights onto the drafter (missing {missing[:3]}, unexpected {unexpected[:3]})")


def _fill_head(cfg: DrafterConfig, sd: dict[str, torch.Tensor], shape: TargetShape | None, p: Path) -> None:
    """A head without lm_head takes the target's (vLLM shares it, whatever tie_word_embeddings says); one
    without a final-norm weight keeps the RMSNorm with unit weights (vLLM's initial value)."""
    if "lm_head.weight" not in sd:
        head = shape.output_embeddings() if shape is not None and shape.output_embeddings is not None else None
        want = (cfg.draft_vocab_size, cfg.hidden_size)
        if head is None or tuple(head.shape) != want:
            got = "no target given" if head is None else f"the target's lm_head has shape {list(head.shape)}"
            raise DriftError(f"{p}: checkpoint has no lm_head.weight and {got}; expected {list(want)}")
        sd["lm_head.weight"] = head.detach().to("cpu", torch.float32)
        cfg.assumptions["lm_head"] = "absent: the target's lm_head (as vLLM shares it)"
    if "norm.weight" not in sd:
        sd["norm.weight"] = torch.ones(cfg.hidden_size)
        cfg.assumptions["norm"] = "absent: final RMSNorm with unit weights"


def _check_target(cfg: DrafterConfig, target: TargetShape, p: Path) -> None:
    if cfg.target_hidden_size != target.hidden_size:
        raise DriftError(
            f"{p / 'config.json'}: target_hidden_size {cfg.target_hidden_size} != the target's hidden_size {target.hidden_size}"
        )
    if cfg.vocab_size != target.vocab_size:
        raise DriftError(f"{p / 'config.json'}: vocab_size {cfg.vocab_size} != the target's vocabulary {target.vocab_size}")


def save_drafter(model: Eagle3Drafter, out_dir, layout: str = "speculators") -> Path:
    """Write a checkpoint in a real public layout (speculators/vLLM by default; any layout in layouts.LAYOUTS
    with a `save`: safeailab, specforge)."""
    cfg = model.config
    if cfg.mtp:
        raise DriftError(f"save_drafter: an MTP head ({cfg.mtp['vllm_module']}) lives in its target's checkpoint; "
                         "there is no drafter layout to write it in (use the target folder itself)")
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
    lay = BY_NAME.get(layout)
    if lay is None or lay.save is None:
        names = savable()
        raise DriftError(f"layout {layout!r}: can save {', '.join(names[:-1])} or {names[-1]}")
    # aux ids are written in the input convention (what vLLM, and a reload, read)
    sd, conf = lay.save(cfg, sd, llama)
    extra = {"trained_window": cfg.trained_window} if cfg.trained_window else {}  # drifttool's key; engines ignore it
    save_file(sd, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(conf | extra, indent=2))
    return out
