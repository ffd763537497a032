"""Capture engines, each declared once: its name, where its run lives (imported only when it runs, so nothing here
imports vLLM) and which engine-specific options it takes. The CLI, the API (`drifttool.run_capture`) and the
runner read these declarations; a new engine (MTP heads, SGLang) is one module plus one entry in ENGINES.

Every engine's run has one signature: `run(target, drafters, probes, out, settings=None, *, resume, overwrite,
progress, extra_manifest, **options, **settings_kw) -> Path`, with `options` limited to its `options`."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ...errors import DriftError

# engine-specific options: the keyword a run takes -> how the CLI spells it
OPTION_FLAGS = {"device_map": "--device-map", "tree": "--tree", "compact": "--no-compact",
                "engine_args": "--vllm-arg", "ray": "--ray", "ray_workers": "--ray-workers"}


class EngineRun(Protocol):
    """The one signature every engine's run implements (the hf and vLLM engines; `Engine.load` returns it): `kw`
    holds the run settings' fields (runner.RunSettings), the output's (runner.Output: resume, overwrite, progress,
    compact) and the engine's own options (OPTION_FLAGS)."""

    def __call__(self, target: Any, drafters: list, probes: str, out: str, settings: Any = None, *,
                 extra_manifest: dict[str, Any] | None = None, **kw: Any) -> Path: ...


@dataclass(frozen=True)
class Engine:
    name: str
    summary: str
    module: str  # the module holding `entry`, imported on first use
    entry: str
    options: frozenset[str]  # the OPTION_FLAGS keys this engine's run accepts
    refusals: tuple[tuple[str, str], ...] = ()  # (option, why this engine cannot take it), for the error line

    def load(self) -> EngineRun:
        return getattr(importlib.import_module(self.module), self.entry)

    def check(self, options: dict[str, Any]) -> None:
        """One line naming the first option this engine does not take, and which engines do."""
        why = dict(self.refusals)
        for opt in options:
            if opt not in OPTION_FLAGS:
                raise DriftError(f"engine {self.name!r}: unknown option {opt!r}; expected one of {sorted(OPTION_FLAGS)}")
            if opt not in self.options:
                takers = " or ".join(f"--engine {e.name}" for e in ENGINES.values() if opt in e.options)
                raise DriftError(f"{OPTION_FLAGS[opt]}: only with {takers}" + (f" ({why[opt]})" if opt in why else ""))

    def run(self, target, drafters, probes: str, out: str, **kw: Any) -> Path:
        self.check({k: v for k, v in kw.items() if k in OPTION_FLAGS})
        return self.load()(target, drafters, probes, out, **kw)


ENGINES: dict[str, Engine] = {e.name: e for e in (
    Engine("hf", "drifttool's own speculative loop over a Hugging Face target", "drifttool.run.engines.hf",
           "run_capture", frozenset({"device_map", "tree", "compact", "ray", "ray_workers"})),
    Engine("vllm", "a real vLLM EAGLE-3 run recorded with hooks and replayed through drifttool's drafter",
           "drifttool.run.engines.vllm.engine", "run_capture_vllm", frozenset({"engine_args"}),
           refusals=(("device_map", "vLLM places the target itself; see --vllm-arg"),
                     ("tree", "vLLM's tree mode is not replayed"),
                     ("ray", "vLLM spreads itself (tensor / data parallel); --ray shards the hf engine's prompts"),
                     ("ray_workers", "see --ray"))),
)}


def engine(name: str) -> Engine:
    if name not in ENGINES:
        raise DriftError(f"--engine {name!r}: expected {' or '.join(ENGINES)}")
    return ENGINES[name]
