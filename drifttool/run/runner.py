"""One capture run, whatever the engine: the settings validated once (`RunSettings`), and the shared body
(trace writer and its lock -> resume bookkeeping -> progress -> SIGTERM as Ctrl-C at a shard boundary).
An engine (engines/: `hf`, drifttool's own loop; `vllm`, a real vLLM run replayed) supplies the
models, the manifest's engine entries and "run this work item -> shards"."""

from __future__ import annotations

import hashlib
import signal
import zlib
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..dtypes import dtype_name
from ..errors import DriftError
from ..trace.sinks import RECENT, SinkSpec
from ..trace.writer import TraceWriter
from .argcheck import need_int, run_settings
from .drafters import DrafterSpec, check_drafters
from .hooks import FULL_EVERY
from .loop import Decoding, check_settings
from .probes import Probe, load_suite

WINDOW_NOTE = ("a drafter with a sliding window W (drafters[].sliding_window) attends slots p with q - W < p <= q; "
               "masses are over those slots, so sink positions outside the window get zero mass "
               "(depths.attn_window_start = the first visible slot)")


FULL_NOTE = ("sink/draft/own masses every round (from the attention kernel's log-sum-exp); entropy, max_prob and "
             "top_pos only on full rounds (rounds.full_stats: rounds 0, N, 2N, ... with N = full_every, and rounds "
             "whose rows were sampled); NaN / NaN / -1 on the others")


DEFAULT_NEW_TOKENS = 64  # a prompt's generation budget when neither --max-new-tokens nor its probe sets one


@dataclass(frozen=True)
class RunSettings:
    """What shapes a capture's numbers, checked at construction and recorded in one canonical form (`record`): the
    manifest's capture settings, which the settings hash and --resume compare."""

    depth: int = 8
    mode: str = "generate"
    max_new_tokens: int | None = None  # None: each probe's own max_new_tokens, else DEFAULT_NEW_TOKENS
    sink: SinkSpec | None = field(default_factory=SinkSpec)  # None: the default sinks
    seed: int = 0
    temperature: float = 0.0
    keep_rows: int = 2
    dtype: Any = "float32"  # a name or torch dtype; kept as its canonical name (dtypes.dtype_name)
    device: str = "cpu"
    limit: int | None = None
    draft_sampling: str = "greedy"
    device_map: str | None = None  # the target spread over devices (model.target.DEVICE_MAPS); None: on `device`
    full_every: int = FULL_EVERY  # entropy / head maxima (full rows) on rounds 0, N, 2N, ... (hooks.Capture)
    recent: int = RECENT  # the recent mass: the last R context slots (trace/sinks.recent_index)

    def __post_init__(self) -> None:
        """Every field checked at construction (also after `dataclasses.replace`); each wrong value is one
        DriftError line naming its CLI option. `sink` None means the default sinks; `dtype` is kept canonical."""
        run_settings(self.depth, 1 if self.max_new_tokens is None else self.max_new_tokens, self.temperature,
                     self.seed, self.keep_rows, self.limit, self.sink)
        object.__setattr__(self, "sink", self.sink or SinkSpec())
        object.__setattr__(self, "dtype", dtype_name(self.dtype))
        check_device(self.device)
        check_settings(self.depth, 1 if self.max_new_tokens is None else self.max_new_tokens, self.mode,
                       self.temperature, self.draft_sampling)
        need_int("--full-every", self.full_every, 0, "a round interval >= 0 (1 = every round, 0 = sampled rows only)")
        need_int("--recent", self.recent, 1, "a number of context slots >= 1 (the recent mass's key set)")
        if self.device_map is not None:
            from ..model.target import check_device_map

            check_device_map(self.device_map)

    @classmethod
    def of(cls, **fields: Any) -> RunSettings:
        """Validated settings from keywords (the fields above); kept for callers that build them by name."""
        return cls(**fields)

    def new_tokens(self, probe) -> int:
        """The one precedence rule for a prompt's generation budget: the --max-new-tokens flag when given (it
        applies to every probe), else the probe's `max_new_tokens`, else DEFAULT_NEW_TOKENS. Recorded per prompt
        (prompts.max_new_tokens) and in the manifest (capture.max_new_tokens_rule)."""
        if self.max_new_tokens is not None:
            return int(self.max_new_tokens)
        return int(probe.max_new_tokens or DEFAULT_NEW_TOKENS)

    @property
    def budget_rule(self) -> str:
        return (f"--max-new-tokens {self.max_new_tokens} for every prompt (probe fields ignored)"
                if self.max_new_tokens is not None else
                f"each probe's max_new_tokens, else {DEFAULT_NEW_TOKENS}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def record(self, probes: str, n_prompts: int) -> dict[str, Any]:
        """The capture settings every engine records in the manifest (and --resume compares)."""
        return self.recorded({"path": str(probes), "sha256": hashlib.sha256(Path(probes).read_bytes()).hexdigest()[:16],
                              "n_prompts": n_prompts, "limit": self.limit})

    def recorded(self, probes: dict[str, Any]) -> dict[str, Any]:
        """`record` with the prompts' source given as is (the live monitor's are requests, not a suite file)."""
        return {
            "depth": self.depth, "mode": self.mode, "max_new_tokens": self.max_new_tokens,
            "max_new_tokens_rule": self.budget_rule,
            "sink": self.sink.to_dict(), "recent": self.recent, "seed": self.seed, "temperature": self.temperature,
            "keep_rows": self.keep_rows, "dtype": self.dtype, "device": self.device,
            "full_every": self.full_every, "full_every_note": FULL_NOTE,
            "probes": probes,
            "attention_window": WINDOW_NOTE,
            # recorded only when used, so traces written before the option keep their settings hash
            **({"device_map": self.device_map} if self.device_map is not None else {}),
        }


def check_device(device: str) -> None:
    """A device drifttool can run models on, present on this machine."""
    try:
        dev = torch.device(str(device))
    except (RuntimeError, ValueError):
        raise DriftError(f"--device {device!r}: not a device name (expected cpu, cuda, cuda:N or mps)") from None
    if dev.type not in ("cpu", "cuda", "mps"):
        raise DriftError(f"--device {device}: drifttool runs models on cpu, cuda[:N] or mps (a {dev.type} device "
                         "holds no values to measure)")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DriftError(f"--device {device}: CUDA is not available on this machine")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise DriftError(f"--device {device}: MPS is not available on this machine")


def settings_of(settings: RunSettings | None, settings_kw: dict[str, Any], who: str) -> RunSettings:
    """An engine's settings: a checked RunSettings, or its keywords (checked here), not both."""
    if settings is not None and settings_kw:
        raise DriftError(f"{who}: give settings or {sorted(settings_kw)}, not both")
    return settings if settings is not None else RunSettings.of(**settings_kw)


def begin(settings: RunSettings | None, settings_kw: dict[str, Any], drafters: list[DrafterSpec], probes: str,
          who: str, *, target: Any = None, out: Output | None = None) -> tuple[RunSettings, list[Probe]]:
    """What every engine's run does first, before anything is loaded or written: the settings checked once, the
    drafter specs checked as a set, every location checked (the output folder, the target and drafter folders:
    preflight), the probe suite read (and cut to `limit`)."""
    st = settings_of(settings, settings_kw, who)
    check_drafters(drafters)
    if out is not None:
        from .preflight import check_locations

        check_locations(target, drafters, out.path, out.resume, out.overwrite)
    suite = load_suite(probes)
    return st, suite[:st.limit] if st.limit is not None else suite


def prompt_seed(seed: int, prompt_id: str) -> int:
    return (seed * 1_000_003 + zlib.crc32(prompt_id.encode())) % (2**31)


@dataclass(frozen=True)
class PromptJob:
    """One prompt's capture as every function below the run sees it: the run's settings plus this prompt's probe,
    token ids and the target's template ids (one object passed down instead of a positional list)."""

    settings: RunSettings
    probe: Probe
    ids: list[int]
    template_ids: tuple[int, ...] = ()

    @property
    def max_new_tokens(self) -> int:
        return self.settings.new_tokens(self.probe)

    @property
    def seed(self) -> int:
        """The prompt's own seed (the run's seed and the prompt id): its sampling and its sampled rows."""
        return prompt_seed(self.settings.seed, self.probe.id)

    def decoding(self) -> Decoding:
        st = self.settings
        return Decoding(depth=st.depth, max_new_tokens=self.max_new_tokens, mode=st.mode, temperature=st.temperature,
                        seed=self.seed, draft_sampling=st.draft_sampling)


@dataclass(frozen=True)
class Output:
    """Where and how a run writes its trace: `resume` a partial trace, `overwrite` a finished one, a progress
    display, and the shards merged into one file per table at the end (`compact`)."""

    path: str
    resume: bool = False
    overwrite: bool = False
    progress: bool = True
    compact: bool = True

    def __post_init__(self) -> None:
        """Each switch a real bool: the string 'no' is truthy (compact='no' compacted, resume='false' resumed)."""
        for name in ("resume", "overwrite", "progress", "compact"):
            v = getattr(self, name)
            if not isinstance(v, bool):
                raise DriftError(f"{name}: {v!r} ({type(v).__name__}); expected True or False")

    @classmethod
    def take(cls, path: Any, kw: dict[str, Any]) -> Output:
        """The output options popped from an engine's keywords (the rest are run settings)."""
        return cls(str(path), **{k: kw.pop(k) for k in ("resume", "overwrite", "progress", "compact") if k in kw})


class Interrupts:
    """Ctrl-C and SIGTERM both raise KeyboardInterrupt, so a run stops at a shard boundary either way -- except
    while a shard is being committed (`held`): then the signal waits until the commit ends. A signal landing
    inside pyarrow's writer cleanup would otherwise be dropped by Python ("Exception ignored in __del__"), and
    one between a rename and its bookkeeping would leave the shard half moved."""

    def __init__(self) -> None:
        self.nesting = 0
        self.pending = False

    def handler(self, signum, frame) -> None:
        if self.nesting:
            self.pending = True
            return
        raise KeyboardInterrupt

    @contextmanager
    def held(self):
        self.nesting += 1
        try:
            yield
        finally:
            self.nesting -= 1
        if not self.nesting and self.pending:  # only after a clean commit; an error in it propagates as is
            self.pending = False
            raise KeyboardInterrupt

    @contextmanager
    def installed(self):
        try:
            old = {s: signal.signal(s, self.handler) for s in (signal.SIGTERM, signal.SIGINT)}
        except ValueError:  # not the main thread: signals stay as they are
            yield
            return
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)


def write_run(out: Output, manifest: dict[str, Any], plan: Callable[[TraceWriter], Iterable[tuple[int, Any]]],
              step: Callable[[TraceWriter, Any, Any], None], n_models: int, tokenizer: Path | None = None,
              cost: Callable[[Any], int] | None = None) -> TraceWriter:
    """The shared body of every engine: open the trace (one writer per folder: the lock is released on any
    exit), plan the work not yet done (`plan(writer)` -> [(prompts in it, item)]), run `step(writer, bar, item)`
    for each under a progress bar with SIGTERM as Ctrl-C, and mark the trace complete (then compact it).
    `cost(item)`: the item's work in tokens (prompt + new tokens, per drafter), for a progress by tokens."""
    with TraceWriter(out.path, manifest, resume=out.resume, overwrite=out.overwrite) as writer:
        if tokenizer is not None and tokenizer.is_file():  # lets the dashboard show token text
            import shutil

            shutil.copyfile(tokenizer, writer.path / "tokenizer.json")
        work = list(plan(writer))
        from .progress import progress_bar

        interrupts = Interrupts()
        writer.guard = interrupts.held
        total = sum(cost(item) for _, item in work) if cost is not None else None
        with interrupts.installed(), progress_bar(sum(n for n, _ in work), n_models, enabled=out.progress,
                                                  total_tokens=total) as bar:
            for _, item in work:
                step(writer, bar, item)
        writer.finish(compact=out.compact)  # merged to one file per table (trace.compact)
    return writer
