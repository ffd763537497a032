"""The live half of the notebook API: capture a prompt with hooks attached (LiveCapture, `dt.capture`), a whole
run on any engine (`dt.capture_run`), a prompt drafted as trees (`dt.capture_tree`). Apart from drifttool.api so
that loading and comparing traces (`dt.load`) never imports torch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .api import AttentionRow, Trace, load
from .dtypes import dtype_name
from .errors import DriftError
from .model.drafter import DrafterBase, Eagle3Drafter
from .model.target import Target, load_target
from .run.argcheck import need_int, run_settings, token_ids
from .run.engines.hf import capture_one
from .run.hooks import Capture
from .run.loop import MODES, SpecResult
from .run.manifest import build_manifest
from .run.probes import Probe
from .run.runner import PromptJob, RunSettings
from .trace.positions import query_position
from .trace.sinks import SinkSpec
from .trace.writer import TraceWriter


class LiveCapture:
    """Context manager: hooks attached on enter; `run()` a prompt; read tables; `attention()` any row."""

    def __init__(self, target, drafter: Eagle3Drafter, depth: int = 8, mode: str = "generate",
                 max_new_tokens: int = 64, sink: SinkSpec | None = None, name: str | None = None, seed: int = 0):
        target, drafter = _target_drafter(target, drafter)
        if not isinstance(drafter, DrafterBase):
            raise DriftError(f"drafter: {type(drafter).__name__}; expected a loaded drafter (drifttool.load_drafter(PATH))")
        run_settings(depth, max_new_tokens, 0.0, seed, 0, None, sink, prefix="")
        if mode not in MODES:
            raise DriftError(f"mode: {mode!r}; expected one of {', '.join(MODES)}")
        if name is not None and (not isinstance(name, str) or not name):
            raise DriftError(f"name: {name!r}; expected a non-empty string")
        self.target: Target = load_target(target)
        self.drafter = drafter
        self.name = name or Path(drafter.config.source).name or drafter.config.variant
        self.depth, self.mode, self.max_new_tokens, self.seed = depth, mode, max_new_tokens, seed
        self.sink = sink or SinkSpec()
        self.cap = Capture(drafter, sink=self.sink, keep_qk=True, keep_rows=0)
        self._tables: dict[str, list[pd.DataFrame]] = {}
        self.results: list[SpecResult] = []
        self._n = 0

    def __enter__(self) -> LiveCapture:
        self.cap.attach()
        return self

    def __exit__(self, *exc) -> None:
        self.cap.detach()

    def run(self, prompt: str | list[int], prompt_id: str | None = None, max_new_tokens: int | None = None) -> SpecResult:
        if not self.cap.attached:
            raise DriftError("use `with dt.capture(...) as cap:` before cap.run()")
        if max_new_tokens is not None:
            need_int("max_new_tokens", max_new_tokens, 1)
        ids = self.target.encode(prompt) if isinstance(prompt, str) else token_ids(prompt)
        probe = Probe(prompt_id or f"live-{self._n}", token_ids=ids)
        self._n += 1
        self.cap.new_prompt()
        st = RunSettings(depth=self.depth, mode=self.mode, max_new_tokens=max_new_tokens or self.max_new_tokens,
                         sink=self.sink, seed=self.seed, keep_rows=0)
        tabs, _, res = capture_one(self.target, self.name, self.drafter, self.cap, PromptJob(st, probe, ids))
        for k, v in tabs.items():
            self._tables.setdefault(k, []).append(v)
        self.results.append(res)
        return res

    def table(self, name: str) -> pd.DataFrame:
        parts = self._tables.get(name)
        if not parts:
            raise DriftError(f"no {name!r} rows yet: call cap.run(prompt) first")
        import pyarrow as pa

        from .trace.layout import add_derived

        df = pd.concat(parts, ignore_index=True)  # + the columns a trace computes on read (lifts, entropy_norm)
        return add_derived(name, pa.Table.from_pandas(df, preserve_index=False), None).to_pandas()

    @property
    def rounds(self) -> pd.DataFrame:
        return self.table("rounds")

    @property
    def depths(self) -> pd.DataFrame:
        return self.table("depths")

    @property
    def heads(self) -> pd.DataFrame:
        return self.table("heads")

    def attention(self, round: int, depth: int, head: int | None = None) -> AttentionRow:
        """Full attention row of one draft step of the last prompt run (from hooked q/k; no L x L map).

        A numpy array (one probability per key slot) that also carries, per slot, `.positions`, `.regions`
        ('sink', 'prompt', 'draft' = the chain's earlier drafted inputs, 'own' = the query's own slot),
        `.token_ids` and `.tokens` (text, when the target has a tokenizer); `.frame()` is all of it as a table."""
        row = self.cap.attention(round, depth, head)
        if not self.results:
            return AttentionRow.of(row, np.arange(len(row)), ["?"] * len(row), [-1] * len(row), [None] * len(row))
        res = self.results[-1]
        rec = res.rounds[round]
        n = rec.context_len
        seq = list(res.prompt_ids) + list(res.output_ids)
        slot_tokens = (seq[1:n + 1] + list(rec.input_ids[1:]))[:len(row)]
        sinks = set(self.sink.positions_in(seq[:n]))
        own = query_position(n, depth)

        def region(p: int) -> str:
            return "own" if p == own else "draft" if p >= n else "sink" if p in sinks else "prompt"

        regions = [region(p) for p in range(len(row))]
        tokens = [self.target.decode([t]) if self.target.tokenizer is not None else None for t in slot_tokens]
        return AttentionRow.of(row, np.arange(len(row)), regions, slot_tokens, tokens)

    def to_trace(self, path, overwrite: bool = False) -> Path:
        settings = {"depth": self.depth, "mode": self.mode, "max_new_tokens": self.max_new_tokens,
                    "sink": self.sink.to_dict(), "seed": self.seed, "temperature": 0.0, "keep_rows": 0,
                    "dtype": dtype_name(self.drafter.lm_head.weight.dtype), "device": str(self.drafter.lm_head.weight.device),
                    "probes": {"path": "live", "n_prompts": self._n}}
        man = build_manifest(self.target, None, {self.name: self.drafter}, settings, {"source": "notebook live capture"})
        with TraceWriter(path, man, overwrite=overwrite) as w:
            for i in range(len(self.results)):
                w.add(self._tables["rounds"][i]["prompt_id"].iloc[0] if len(self._tables["rounds"][i]) else f"live-{i}",
                      {k: v[i] for k, v in self._tables.items() if k != "rows_index"})
            w.finish()
        return w.path


def _target_drafter(a, b) -> tuple:
    """(target, drafter) from either argument order: `speculate(target, drafter)` is the documented one."""
    if isinstance(a, DrafterBase) and not isinstance(b, DrafterBase):
        return b, a
    return a, b


def capture_run(target, drafters: list, probes, out, engine: str = "hf", **kw) -> Trace:
    """A whole capture run as `drifttool capture` does it, on any engine (`hf`, `vllm`; run/engines): `drafters`
    are checkpoint folders, `NAME=DIR?flag=value` strings or DrafterSpecs; `kw` the run settings (`depth`, `mode`,
    `max_new_tokens`, ...) and the engine's own options (`tree`, `device_map`, `compact`, `engine_args`), which
    are checked against what the engine declares; `sink` defaults to `auto`, as the CLI's (a SinkSpec or its
    text). Returns the written trace."""
    from .run.drafters import DrafterSpec
    from .run.engines import engine as engine_named

    s = kw.get("sink")  # None: the default; 0 / "0" mean no sink positions, not the default
    kw["sink"] = s if isinstance(s, SinkSpec) else SinkSpec.parse("auto" if s is None else str(s))
    specs = [d if isinstance(d, DrafterSpec) else DrafterSpec.parse(str(d)) for d in drafters]
    return load(engine_named(engine).run(target, specs, str(probes), str(out), **kw))


def patch(target, drafters: list, probes, out, sites: list, spans: list[str] = (), **kw) -> Trace:
    """`drifttool patch` from a notebook: every drafter clean and under each intervention (`sites`: strings as the
    CLI's --site, e.g. 'feedback.norm@2', or run.interventions.Intervention objects; `spans`: prompt spans as
    --span, e.g. 'turn:system'; `scan=W` as --scan --scan-window W), paired round by round (run/engines/patch.py);
    `kw` the run settings as capture_run's (greedy only). Returns the written trace; its `patch_answer()` says what
    each intervention changes, `span_scan()` ranks the spans."""
    from .run.drafters import DrafterSpec
    from .run.engines.patch import run_patch
    from .run.interventions import Intervention, parse

    s = kw.get("sink")
    kw["sink"] = s if isinstance(s, SinkSpec) else SinkSpec.parse("auto" if s is None else str(s))
    specs = [d if isinstance(d, DrafterSpec) else DrafterSpec.parse(str(d)) for d in drafters]
    ivs = [x if isinstance(x, Intervention) else parse(str(x)) for x in sites]
    ivs += [Intervention("prompt", "delete", span=str(x)) for x in spans]
    return load(run_patch(str(target), specs, str(probes), str(out), ivs, **kw))


def capture(target, drafter: Eagle3Drafter, depth: int = 8, **kw) -> LiveCapture:
    """`with dt.capture(target, drafter, depth=8) as cap:` -- the same order and depth default as
    `dt.speculate(target, drafter, ids)` and the CLI's --depth. (drafter, target) is accepted too."""
    target, drafter = _target_drafter(target, drafter)
    return LiveCapture(target, drafter, depth=depth, **kw)


def capture_tree(target, drafter: Eagle3Drafter, prompt: str | list[int], tree: str, max_new_tokens: int = 64,
                 sink: SinkSpec | None = None, temperature: float = 0.0, seed: int = 0,
                 name: str | None = None) -> dict[str, pd.DataFrame]:
    """One prompt drafted with trees (`tree` as `capture --tree`: 'dynamic:top_k=..,depth=..,total=..' or rank
    paths), captured live; the trace's tables (`tree_nodes`, `tree_heads`, `rounds`, `prompts`) as DataFrames."""
    from .run.engines.hf_tree import capture_tree_prompt
    from .run.tree import parse_tree

    target, drafter = _target_drafter(target, drafter)
    if not isinstance(drafter, DrafterBase):
        raise DriftError(f"drafter: {type(drafter).__name__}; expected a loaded drafter (drifttool.load_drafter(PATH))")
    run_settings(None, max_new_tokens, temperature, seed, 0, None, sink, prefix="")  # depth: the tree's
    spec = parse_tree(tree)
    target = load_target(target)
    ids = target.encode(prompt) if isinstance(prompt, str) else token_ids(prompt)
    name = name or Path(drafter.config.source or "").name or drafter.config.variant
    st = RunSettings(depth=spec.max_depth, max_new_tokens=max_new_tokens, sink=sink, seed=seed,
                     temperature=temperature, keep_rows=0)
    tabs = capture_tree_prompt(target, {name: drafter}, PromptJob(st, Probe("live-tree", token_ids=ids), ids), spec)
    return {k: v for k, v in tabs.items() if k not in ("depths", "heads", "aux")}
