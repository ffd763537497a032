"""The public drafter checkpoint layouts, one table entry each: how a config.json is recognised, where its
draft-layer fields and EAGLE flags sit, which tensor names it uses, and how a drafter is written in it.
Adding a layout is adding one `Layout` to `LAYOUTS`; config reading (ckpt_config) and weight reading and
saving (checkpoint) consult only this table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import DriftError
from . import flags as flag_table
from .config import DrafterConfig

Config = dict[str, Any]


@dataclass(frozen=True)
class Layout:
    """One checkpoint layout.

    detect: whether a config.json is in this layout (tried in table order; may raise for a config that claims
    the layout but cannot be read). layer: the dict holding the draft layer's Llama fields and a label for
    error lines. eagle: NVIDIA's eagle_config block ({} elsewhere), read first for norm_before_fc and aux ids.
    reading: which engine reading's flag defaults apply when the config is silent (model/flags.py). renames: tensor-name
    prefixes this layout writes, mapped to drifttool's (speculators/vLLM) names. note: assumptions a loaded
    config of this layout carries. save: (config, state dict, Llama block) -> (state dict, config.json) in
    this layout, or None where drifttool cannot write it."""

    name: str
    detect: Callable[[Config], bool]
    layer: Callable[[Config, str], tuple[Config, str]] = lambda raw, where: (raw, where)
    eagle: Callable[[Config], Config] = lambda raw: {}
    reading: str = "vllm-flat"
    renames: tuple[tuple[str, str], ...] = ()
    note: Callable[[DrafterConfig], None] = lambda cfg: None
    save: Callable[[DrafterConfig, dict, Config], tuple[dict, Config]] | None = None


# -- speculators (vLLM's native format) ---------------------------------------------------------------------
def _is_speculators(raw: Config) -> bool:
    if raw.get("speculators_model_type") is None:
        return False
    if raw["speculators_model_type"] != "eagle3":
        raise DriftError(
            f"config.json: speculators_model_type is {raw['speculators_model_type']!r}; drifttool supports 'eagle3'"
        )
    return True


def _nested_layer(raw: Config, where: str) -> tuple[Config, str]:
    layer = raw.get("transformer_layer_config")
    if not isinstance(layer, dict):
        raise DriftError(f"{where}: missing required field 'transformer_layer_config' (a Llama config)")
    return layer, f"{where}: transformer_layer_config"


def _save_speculators(cfg: DrafterConfig, sd: dict, llama: Config) -> tuple[dict, Config]:
    if cfg.draft_vocab_size == cfg.vocab_size and not sd["d2t"].any():
        # Full-vocab drafter with the identity mapping: speculators omits d2t/t2d, and vLLM (0.32) refuses
        # a d2t tensor when draft_vocab_size == vocab_size (it has no draft_id_to_target_id parameter then).
        sd.pop("d2t")
        sd.pop("t2d")
    conf = {
        "architectures": ["Eagle3DraftModel"],
        "speculators_model_type": "eagle3",
        "transformer_layer_config": llama,
        "draft_vocab_size": cfg.draft_vocab_size,
        "target_hidden_size": cfg.target_hidden_size,
        "eagle_aux_hidden_state_layer_ids": cfg.input_aux_layer_ids,
        **cfg.flags(),  # speculators keeps every flag at the top level, where vLLM reads them
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": None, "architectures": ["LlamaForCausalLM"]},
        },
    }
    return sd, conf


# -- SafeAILab EAGLE-3 and SpecForge: a flat Llama config, the layer's tensors under midlayer. ---------------
def _looks_llama(raw: Config) -> bool:
    return "hidden_size" in raw and "num_attention_heads" in raw


def _is_specforge(raw: Config) -> bool:
    return _looks_llama(raw) and any(f.name in raw for f in flag_table.FLAGS if f.eagle31)


def _is_safeailab(raw: Config) -> bool:
    return any("Eagle3" in a for a in raw.get("architectures") or []) or (
        _looks_llama(raw) and "draft_vocab_size" in raw
    )


def _save_flat(cfg: DrafterConfig, sd: dict, llama: Config, eagle31: bool) -> tuple[dict, Config]:
    """SpecForge (eagle31) and SafeAILab: every flag of the table at the top level, except, in SafeAILab, the
    EAGLE-3.1 fields it has no place for (refused when on by _save_safeailab, left out when off)."""
    sd = {("midlayer." + k[len("layers.0.") :] if k.startswith("layers.0.") else k): v for k, v in sd.items()}
    if not cfg.has_embed:  # the target's embeddings: these layouts take them from the target
        sd.pop("embed_tokens.weight", None)
    conf = dict(llama, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=cfg.draft_vocab_size)
    if cfg.target_hidden_size != cfg.hidden_size:
        conf["target_hidden_size"] = cfg.target_hidden_size
    # Written although these layouts usually leave them implicit: without them a reload would silently
    # fall back to the default aux layers [2, L//2, L-3] and every flag's default.
    conf["eagle_aux_hidden_state_layer_ids"] = cfg.input_aux_layer_ids
    conf.update({f.name: cfg.flag(f.name) for f in flag_table.FLAGS if eagle31 or not f.eagle31})
    return sd, conf


def _save_safeailab(cfg: DrafterConfig, sd: dict, llama: Config) -> tuple[dict, Config]:
    on = [f.name for f in flag_table.FLAGS if f.eagle31 and cfg.flag(f.name)]
    if on:
        raise DriftError(
            f"layout 'safeailab' cannot express {' / '.join(on)} (EAGLE-3.1); save as specforge or speculators"
        )
    return _save_flat(cfg, sd, llama, eagle31=False)


def _save_specforge(cfg: DrafterConfig, sd: dict, llama: Config) -> tuple[dict, Config]:
    return _save_flat(cfg, sd, llama, eagle31=True)


def _specforge_note(cfg: DrafterConfig) -> None:
    if cfg.norm_output:
        cfg.assumptions["specforge_norm_output"] = (
            "trusted config; SpecForge checkpoints trained before PR #879 fed back pre-norm hidden "
            "despite norm_output: true (override norm_output=false to test that)"
        )


# Wrapper prefixes any trainer may leave on tensor names ("model.", "draft_model.").
WRAPPER_RENAMES = (("model.", ""), ("draft_model.", ""))
MIDLAYER = (("midlayer.", "layers.0."),)
# SGLang's legacy names for the per-chunk fc_norm.
AUX_NORM = (("aux_norm.", "fc_norm."), ("aux_norms.", "fc_norm."))

LAYOUTS: tuple[Layout, ...] = (
    Layout(
        "speculators",
        _is_speculators,
        layer=_nested_layer,
        reading="vllm-speculators",
        renames=WRAPPER_RENAMES,
        save=_save_speculators,
    ),
    Layout(
        "nvidia",
        lambda raw: isinstance(raw.get("eagle_config"), dict),
        eagle=lambda raw: raw["eagle_config"],
        renames=WRAPPER_RENAMES,
    ),
    Layout(
        "specforge",
        _is_specforge,
        renames=WRAPPER_RENAMES + MIDLAYER + AUX_NORM,
        note=_specforge_note,
        save=_save_specforge,
    ),
    Layout("safeailab", _is_safeailab, renames=WRAPPER_RENAMES + MIDLAYER, save=_save_safeailab),
)
BY_NAME = {lay.name: lay for lay in LAYOUTS}


def detect_layout(cfg: Config, keys: set[str] | None = None, where=None) -> str:
    """Which public layout a config.json belongs to (the first entry of LAYOUTS that claims it); `where`: the
    folder, named in the error (a target folder given as a drafter is said to be one)."""
    for lay in LAYOUTS:
        if lay.detect(cfg):
            return lay.name
    arch = cfg.get("architectures") if isinstance(cfg, dict) else None
    name = f"{where}/config.json" if where is not None else "config.json"
    hint = ""
    if isinstance(arch, list) and arch and all(isinstance(a, str) and a.endswith("ForCausalLM") for a in arch):
        hint = f"; it is a target model's config ({arch[0]}), not a drafter's: give this folder as --target"
    raise DriftError(
        f"{name}: unknown drafter layout (expected speculators_model_type 'eagle3', an eagle_config block, "
        f"or a Llama config with draft_vocab_size / architectures LlamaForCausalLMEagle3){hint}"
    )


def _all_renames() -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for lay in LAYOUTS:
        out += [r for r in lay.renames if r not in out]
    return tuple(out)


# Every layout's renames apply to every checkpoint: converted checkpoints often keep another layout's names.
RENAMES = _all_renames()


def canonical_key(key: str) -> str:
    """A tensor name as drifttool's drafter names it (speculators/vLLM keys)."""
    for old, new in RENAMES:
        if key.startswith(old):
            key = new + key[len(old) :]
    return key


def savable() -> list[str]:
    return [lay.name for lay in LAYOUTS if lay.save is not None]
