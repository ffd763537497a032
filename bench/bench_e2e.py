"""End-to-end `run_capture` throughput (rounds/s), split into target, drafter, capture and trace-write time.

Runs the bundled demo models (drifttool/zoo/models/sink: target, eagle3, eagle3.1) on probes/quick.jsonl
when they are installed, else random tiny models built on the fly with token-id probes (the same
fallback `drifttool demo` uses); the header says which. The split comes from timers wrapped around the
library's functions for the duration of the run (the library is not changed):

  target      Target.forward (prefill, verification, teacher forcing)
  drafter     Eagle3Drafter.forward (refresh + chained steps; includes the per-step capture hooks)
  capture     Capture.begin_round / end_round (the batched per-round computation)
  tables      records.prompt_tables / row_samples (shaping a prompt's captures into trace tables)
  trace write TraceWriter (shards, manifest)
  load        load_target / read_drafter
  other       the rest: speculative-loop bookkeeping, tokenisation, acceptance, progress

    python bench/bench_e2e.py            # full
    python bench/bench_e2e.py --smoke
"""

from __future__ import annotations

import argparse
import functools
import importlib
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from _common import print_table

from drifttool import demo
from drifttool.model.drafter import Eagle3Drafter
from drifttool.model.target import Target
from drifttool.run.hooks import Capture
from drifttool.trace.writer import TraceWriter

dcap = importlib.import_module("drifttool.run.engines.hf")  # the module (the package exports a function of that name)
drafters_mod = importlib.import_module("drifttool.run.drafters")  # where every engine reads its drafters
PARTS = ("target", "drafter", "capture", "tables", "trace write", "load")


class Timers:
    """Wall and CPU time per label; only the outermost timed call counts (no double counting)."""

    def __init__(self):
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self._busy = False
        self._undo: list = []

    def wrap(self, owner, name: str, label: str) -> None:
        orig = getattr(owner, name)

        @functools.wraps(orig)
        def timed(*args, **kwargs):
            if self._busy:
                return orig(*args, **kwargs)
            self._busy = True
            w, c = time.perf_counter(), time.thread_time()
            try:
                return orig(*args, **kwargs)
            finally:
                self.wall[label] += time.perf_counter() - w
                self.cpu[label] += time.thread_time() - c
                self._busy = False

        setattr(owner, name, timed)
        self._undo.append((owner, name, orig))

    def restore(self) -> None:
        for owner, name, orig in reversed(self._undo):
            setattr(owner, name, orig)
        self._undo = []


def instrument() -> Timers:
    t = Timers()
    t.wrap(Target, "forward", "target")
    t.wrap(Eagle3Drafter, "forward", "drafter")
    t.wrap(Capture, "begin_round", "capture")
    t.wrap(Capture, "end_round", "capture")
    for fn in ("prompt_tables", "prompt_row", "add_rows"):
        t.wrap(dcap, fn, "tables")
    for fn in ("__init__", "add", "finish"):
        t.wrap(TraceWriter, fn, "trace write")
    t.wrap(dcap, "load_target", "load")
    t.wrap(drafters_mod, "read_drafter", "load")
    return t


def models(work: Path) -> tuple[Path, Path, str]:
    """(models dir, probe suite, description)."""
    found = demo.bundled("sink")
    if found is not None:
        return found, demo.probes_dir() / "quick.jsonl", f"bundled models {found} + probes/quick.jsonl"
    m = demo._tiny_models(work / "models")
    return m, demo._token_probes(m), "random tiny models built on the fly (no bundled zoo installed) + token-id probes"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--limit", type=int, default=None, help="first N probes only")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args(argv)
    if a.smoke:
        a.depth, a.max_new_tokens, a.limit = 4, 8, 1
    torch.set_num_threads(a.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    with tempfile.TemporaryDirectory(prefix="drift-bench-") as tmp:
        mdir, probes, desc = models(Path(tmp))
        specs = [dcap.DrafterSpec("eagle3", str(mdir / "eagle3")), dcap.DrafterSpec("eagle3.1", str(mdir / "eagle3.1"))]
        print(f"# run_capture end to end: {desc}; drafters eagle3, eagle3.1; depth {a.depth}, "
              f"max_new_tokens {a.max_new_tokens} (probe values win), {a.threads} torch thread(s)")
        timers = instrument()
        try:
            w0, c0 = time.perf_counter(), time.thread_time()
            out = dcap.run_capture(str(mdir / "target"), specs, str(probes), str(Path(tmp) / "bench.drift"),
                                   depth=a.depth, max_new_tokens=a.max_new_tokens, limit=a.limit,
                                   progress=False)
            wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
        finally:
            timers.restore()
        from drifttool.trace import read_table

        n_rounds = len(read_table(out, "rounds"))
        n_prompts = len(read_table(out, "prompts"))
        sizes = trace_bytes(Path(out))
    parts = {p: (timers.wall[p], timers.cpu[p]) for p in PARTS}
    parts["other"] = (wall - sum(w for w, _ in parts.values()), cpu - sum(c for _, c in parts.values()))
    run_wall = wall - parts["load"][0]
    rows = [[p, f"{w:.2f}", f"{100 * w / wall:.1f}%", f"{c:.2f}", f"{1e3 * w / max(1, n_rounds):.2f}"]
            for p, (w, c) in parts.items()]
    rows.append(["total", f"{wall:.2f}", "100%", f"{cpu:.2f}", f"{1e3 * wall / max(1, n_rounds):.2f}"])
    print_table(["part", "wall s", "share", "cpu s", "wall ms/round"], rows)
    rps = n_rounds / run_wall
    share = {p: 100 * parts[p][0] / wall for p in ("target", "drafter", "capture", "trace write")}
    per_round = {k: v / max(1, n_rounds) for k, v in sizes.items()}
    print("trace bytes per round (all files of the trace folder / rounds; by table folder): "
          + ", ".join(f"{k} {v:.0f}" for k, v in sorted(per_round.items(), key=lambda kv: -kv[1])))
    print(f"SUMMARY e2e: {rps:.1f} rounds/s ({n_rounds} rounds, {n_prompts} prompt x drafter runs, "
          f"excluding model load); target {share['target']:.0f}%, drafter {share['drafter']:.0f}%, "
          f"capture {share['capture']:.0f}%, trace write {share['trace write']:.0f}% of wall time; "
          f"trace {per_round['total']:.0f} bytes/round")
    return {"rounds_per_s": rps, "rounds": n_rounds, "models": desc, "share": share, "bytes_per_round": per_round}


def trace_bytes(path: Path) -> dict[str, int]:
    """Bytes on disk of a trace folder: in total and per top-level entry (table folders, manifest, rows)."""
    out = {"total": 0}
    for f in path.rglob("*"):
        if f.is_file():
            top = f.relative_to(path).parts[0]
            out[top] = out.get(top, 0) + f.stat().st_size
            out["total"] += f.stat().st_size
    return out


if __name__ == "__main__":
    main()
