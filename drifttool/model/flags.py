"""The drafter flags, one declaration each: where every layout keeps a flag, the weights it needs, what it
excludes, the default each engine applies when a config is silent, and how conformance names a reading of it.

Config reading (ckpt_config), saving in every layout (layouts), weight checks (checkpoint), `follow`, conformance
and the conform readings all iterate `FLAGS`; adding a flag is one `Flag` here plus its effect in drafter.py
(read as `cfg.flag(name)`; a dataclass field on DrafterConfig is optional)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Flag:
    """One drafter flag.

    eagle_config: NVIDIA's eagle_config block may hold it (read before the top level, as vLLM does). legacy: other
    names an engine reads as this flag (true there turns it on). weights: the tensor-name prefix the flag needs (a
    norm's weights); None: no weights. excludes: flags that may not be on together with it. eagle31: an EAGLE-3.1
    field, which a layout without those fields (SafeAILab) cannot express when true. defaults: the value each
    reading assumes when the config is silent, by key `vllm-speculators`, `vllm-flat`, `sglang`, `speculators`
    (absent: false). applied / ignored: how conform names the engine reading it on / off. stray / missing: what vLLM
    does with the flag's weights when the flag is off / with the flag on and no weights. unsupported: engines that
    have no such flag (they serve the checkpoint without it)."""

    name: str
    what: str
    eagle_config: bool = False
    legacy: tuple[str, ...] = ()
    weights: str | None = None
    excludes: tuple[str, ...] = ()
    eagle31: bool = False
    defaults: dict[str, bool] = field(default_factory=dict)
    applied: str = ""
    ignored: str = ""
    stray: str = ""
    missing: str = ""
    unsupported: tuple[str, ...] = ()

    def default(self, reading: str) -> bool:
        return bool(self.defaults.get(reading, False))


FLAGS: tuple[Flag, ...] = (
    Flag("fc_norm", "an RMSNorm on each captured target hidden state before fc (EAGLE-3.1)",
         legacy=("use_aux_norm",), weights="fc_norm.", excludes=("norm_before_fc",), eagle31=True,
         applied="fc_norm applied with unit weights", ignored="fc_norm ignored",
         stray="refuses to load (no module fc_norm; model_executor/models/utils.py:443)",
         missing="runs fc_norm with unit weights (RMSNorm's initial value), silently", unsupported=("sglang",)),
    Flag("norm_output", "feed back the post-norm hidden, the tensor the lm_head sees (EAGLE-3.1)", eagle31=True,
         applied="post-norm hidden fed back (norm_output applied)",
         ignored="norm_output ignored (pre-norm hidden fed back, as EAGLE-3)", unsupported=("sglang",)),
    Flag("norm_before_fc", "one RMSNorm over the concatenated features before fc (speculators' single-norm form)",
         eagle_config=True, weights="input_norm.", excludes=("fc_norm",),
         applied="norm_before_fc applied (unit weights)", ignored="norm_before_fc ignored",
         stray="drops input_norm.* silently (llama_eagle3.py:464-465)",
         missing="runs input_norm with unit weights, silently", unsupported=("sglang",)),
    Flag("norm_before_residual", "the residual taken after the hidden-state norm",
         defaults={"vllm-speculators": True},
         applied="norm_before_residual assumed true", ignored="norm_before_residual assumed false"),
)
BY_NAME: dict[str, Flag] = {f.name: f for f in FLAGS}


def names() -> tuple[str, ...]:
    """The flag names in table order (the order conform tries them and the manifest lists them)."""
    return tuple(f.name for f in FLAGS)


def conflicts(values: dict[str, bool]) -> list[tuple[str, str]]:
    """Pairs of flags that are on together although one excludes the other (each pair once)."""
    out: list[tuple[str, str]] = []
    for f in FLAGS:
        for other in f.excludes:
            pair = tuple(sorted((f.name, other)))
            if values.get(f.name) and values.get(other) and pair not in out:
                out.append(pair)
    return out


def conflict_line(values: dict[str, bool]) -> str | None:
    """One sentence naming the first exclusive pair that is on, or None."""
    pairs = conflicts(values)
    if not pairs:
        return None
    a, b = pairs[0]
    return f"{a} and {b} are mutually exclusive (set at most one)"


def weight_prefixes() -> tuple[str, ...]:
    """Tensor-name prefixes some flag owns: loaded only under their flag (or its override)."""
    return tuple(f.weights for f in FLAGS if f.weights)


def reading_names() -> dict[tuple[str, bool], str]:
    """(flag, on) -> how conform names an engine that reads the flag that way."""
    return {(f.name, on): (f.applied if on else f.ignored) or f"{f.name} {'on' if on else 'off'}"
            for f in FLAGS for on in (False, True)}
