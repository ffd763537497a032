"""Generate the documentation pages that come from the code: the CLI reference (docs/cli.md, every command's
--help), the metric table (the block of docs/metrics.md between its markers, from trace/metric_table.py), the
two commands' measured times (the blocks of README.md and docs/getting_started.md between their markers, from
bench/results/first_hour.json, written by bench/bench_first_hour.py), and the live monitor's settings, series and
measured overhead (docs/monitor.md and README.md, from drifttool/monitor and bench/results/monitor_overhead.json),
and the capture's overhead before / after a change (docs/benchmarks.md, from bench/results/capture_overhead.json).

`--check` writes nothing and exits 1 naming each page that differs from what the code generates (the test command
runs it, so a page edited by hand or left behind by a code change fails there)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- metric-table:begin (scripts/docs_gen.py) -->", "<!-- metric-table:end -->"
TIMES = ("<!-- times:begin (scripts/docs_gen.py from bench/results/first_hour.json) -->", "<!-- times:end -->")
OVERHEAD = ("<!-- overhead:begin (scripts/docs_gen.py from bench/results/monitor_overhead.json) -->",
            "<!-- overhead:end -->")
SETTINGS = ("<!-- monitor-settings:begin (scripts/docs_gen.py) -->", "<!-- monitor-settings:end -->")
SERIES = ("<!-- monitor-metrics:begin (scripts/docs_gen.py) -->", "<!-- monitor-metrics:end -->")
COUNT = ("<!-- monitor-count:begin (scripts/docs_gen.py) -->", "<!-- monitor-count:end -->")
GOALS = {"sample=0.01": 0.98, "sample=0.1": 0.90}  # the monitor's throughput goals against an unmonitored server


def cli_page() -> str:
    """Every command's --help as the CLI prints it (plain text, 100 columns)."""
    import typer
    from typer.testing import CliRunner

    from drifttool.cli import app

    runner = CliRunner()
    env = {"COLUMNS": "100", "TERM": "dumb", "NO_COLOR": "1"}
    root = typer.main.get_command(app)
    parts = ["# CLI reference", "",
             "Generated from the command-line app (`scripts/docs_gen.py`); `drifttool COMMAND --help` prints the same.",
             ""]
    for name in ["", *root.list_commands(None)]:
        r = runner.invoke(app, [*([name] if name else []), "--help"], env=env, prog_name="drifttool")
        parts += [f"## drifttool {name}".rstrip(), "", "```text", _plain(r.output), "```", ""]
    return "\n".join(parts).rstrip() + "\n"


def _plain(text: str) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    return "\n".join(ln.rstrip() for ln in text.splitlines()).strip("\n")


def metric_block() -> str:
    from drifttool.trace.metric_table import describe

    return md_table(describe())


def md_table(rows: list[dict]) -> str:
    cols = list(rows[0])
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(str(r[c]).replace("|", "\\|") for c in cols) + " |" for r in rows]
    return "\n".join(out)


class MarkerError(ValueError):
    """A page's generated-block markers are not one begin followed by one end."""


def with_block(text: str, block: str, marks: tuple[str, str] = (BEGIN, END), page: str = "page") -> str:
    """`text` with the block between its markers replaced; the markers must be there once each, begin first (else
    MarkerError naming `page`: swapped markers duplicated the block, a missing one was a traceback)."""
    for m, which in zip(marks, ("begin", "end")):
        n = text.count(m)
        if n != 1:
            raise MarkerError(f"{page}: {which} marker {m!r} is {'missing' if not n else f'there {n} times (twice or more)'}; "
                              "expected it once")
    a, b = text.index(marks[0]) + len(marks[0]), text.index(marks[1])
    if b < a:
        raise MarkerError(f"{page}: end marker {marks[1]!r} comes before its begin marker {marks[0]!r}; expected "
                          "begin, then end")
    return text[:a] + "\n" + block + "\n" + text[b:]


def _dur(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m} min {s:02d} s" if m else f"{s} s"


def _load(results: Path) -> dict:
    """A bench results file, or one line naming it (a truncated file was a JSONDecodeError traceback)."""
    try:
        data = json.loads(results.read_text())
    except ValueError as e:
        raise MarkerError(f"{results}: not valid JSON ({e}); rerun its bench or restore it from git") from None
    if not isinstance(data, dict):
        raise MarkerError(f"{results}: expected a JSON object, got {type(data).__name__}")
    return data


def times_block(results: Path) -> str:
    """The two commands' times in one paragraph, from the first-hour bench's results (what it ran, where, when)."""
    if not results.is_file():
        return "(not measured yet: run `bench/bench_first_hour.py`)"
    data = _load(results)
    runs = {(r["command"], r["load"]): r for r in data["runs"]}
    cores = data["machine"]["cores"]
    parts = []
    setup = runs.get(("setup", 0))
    if setup:
        slow = max(setup["stages"].items(), key=lambda kv: kv[1], default=None)
        parts.append(f"`scripts/setup.sh` {_dur(setup['seconds'])}" + (f" (longest stage: {slow[0]}, {_dur(slow[1])})"
                                                                      if slow else ""))
    idle, busy = runs.get(("demo", 0)), runs.get(("demo", cores))
    if idle:
        parts.append(f"`drifttool demo` {_dur(idle['seconds'])} idle"
                     + (f", {_dur(busy['seconds'])} with every core busy" if busy else ""))
    tests = runs.get(("tests", 0))
    if tests:
        passed = tests.get("passed") or []
        parts.append(f"the test command {_dur(tests['seconds'])} idle"
                     + (f" ({' + '.join(str(p) for p in passed)} tests passed: the main suite, pandas 2.2, the "
                        "speculators and the vLLM environments)" if len(passed) == 4 else ""))
    dates = sorted({r["date"] for r in runs.values()})
    return (f"Measured on a fresh clone with a fresh HOME and pip cache ({cores} CPU cores, packages from the "
            f"machine's pip index; `bench/bench_first_hour.py`, {' and '.join(dates)}): " + "; ".join(parts) + ".")


def overhead_blocks(results: Path) -> str:
    """The float32 results, then the same server in bf16 when measured (`--dtype bfloat16 --out ..._bf16.json`)."""
    bf16 = results.with_name(results.stem + "_bf16.json")
    if not bf16.is_file():
        return overhead_block(results)
    off = next((r for r in _load(bf16)["runs"] if r["monitor"] == "off"), {})
    lead = (f"The same in bfloat16, the documented command's dtype (the replay runs in the server's dtype; the "
            f"unmonitored server made {off.get('tokens_per_s', float('nan')):g} tokens/s on this CPU)")
    return overhead_block(results) + " " + overhead_block(bf16, lead)


def overhead_block(results: Path, lead: str = "Throughput with the monitor on, against the same server without it") -> str:
    """The live monitor's throughput ratios, from bench/bench_monitor_overhead.py's results."""
    if not results.is_file():
        return "(not measured yet: run `bench/bench_monitor_overhead.py` in the vLLM environment)"
    data = _load(results)
    w, runs = data["workload"], {r["monitor"]: r for r in data["runs"]}
    parts = [(f"at {k} **{runs[k]['ratio']:.3f}x** (goal >= {g:.2f}x: {'met' if runs[k]['ratio'] >= g else 'missed'}"
              if runs[k].get("ratio") is not None and runs[k].get("replayed", 1) > 0 else
              f"at {k} not measured (no request replayed: the ratio would be the unmonitored server's")
             + (f"; {runs[k]['sampled']} requests sampled, {runs[k]['replayed']} replayed, {runs[k]['dropped']} "
                f"dropped" + (f", {runs[k]['disagreements']} disagreeing with vLLM's drafter"
                              if "disagreements" in runs[k] else "")
                + f", the replay caught up {runs[k]['caught_up_after_s']:g} s after the workload"
                if "sampled" in runs[k] else "") + ")" for k, g in GOALS.items() if k in runs]
    return (f"{lead} (`bench/bench_monitor_overhead.py`, "
            f"{w['engine']} on {data['machine']['cores']} CPU cores, {data['date']}; {w['requests']} chat requests x "
            f"{w['tokens']} tokens, {w['concurrency']} at a time, {w['dtype']}; one server start each): "
            + "; ".join(parts) + "."
            + (" A ratio above 1.0 is run-to-run noise: one server start per setting." if any(
                (r.get("ratio") or 0) > 1 for r in runs.values() if r["monitor"] != "off") else ""))


STUDY = ("<!-- vllm-throughput:begin (scripts/docs_gen.py from bench/results/vllm_throughput.json) -->",
         "<!-- vllm-throughput:end -->")


def study_block(results: Path) -> str:
    """capture --engine vllm against plain vLLM, from bench/bench_vllm_throughput.py's result."""
    if not results.is_file():
        return ("(not measured on this version yet: `.vllm-env/bin/python bench/bench_vllm_throughput.py --prompts 32` "
                "writes bench/results/vllm_throughput.json, from which this table is generated)")
    r = _load(results)
    met = "met" if r["ratio_start_to_stop"] >= r["goal"] else "missed"
    return (f"vLLM {r['vllm']} on {r['cores']} {r['device'].upper()} cores, {r['date']}: {r['prompts']} prompts of "
            f"{r['min_len']}-{r['max_len']} tokens, {r['new']} new, K = {r['depth']}, {r['dtype']}; the same output "
            f"tokens and acceptance both ways ({r['rounds']} rounds, {r['accepted']} accepted drafts).\n\n"
            "| prompts | plain, start to stop | plain, generate only | capture, start to stop | capture, after vLLM's "
            "start | ratio start to stop | ratio without start/stop |\n|---|---|---|---|---|---|---|\n"
            f"| {r['prompts']} | {r['plain_total_s']:.1f} s | {r['plain_generate_s']:.1f} s | {r['capture_total_s']:.1f} s "
            f"| {r['capture_after_start_s']:.1f} s | {r['ratio_start_to_stop']:.2f}x | "
            f"{r['ratio_without_start_stop']:.2f}x |\n\n"
            f"The goal (>= {r['goal']:.1f}x of plain vLLM, start to stop) is {met} in this run.")


CAPTURE = ("<!-- capture-overhead:begin (scripts/docs_gen.py from bench/results/capture_overhead.json) -->",
           "<!-- capture-overhead:end -->")
CAPTURE_BARS = {"2k": 1.10, "16k": 1.05}  # bench shape: the capture's per-round cost against capture off


def capture_block(results: Path) -> str:
    """The capture's overhead before / after a change, from `bench_overhead.py --against REV --json`."""
    if not results.is_file():
        return ("(not measured yet: `python bench/bench_overhead.py --alternate 2k,16k --against REV --json "
                "bench/results/capture_overhead.json`)")
    r = _load(results)
    before, after = r["before"], r["after"]
    rows = ["| context | version | capture off (ms / round) | taps alone / off | whole capture / off | bar |",
            "|---|---|---|---|---|---|"]
    for ctx, res in r["contexts"].items():
        bar = CAPTURE_BARS.get(ctx)
        for v in ("before", "after"):
            x = res[v]
            verdict = "" if bar is None else f"<= {bar:.2f}: {'met' if x['on']['mean'] <= bar else 'missed'}"
            rows.append(f"| {ctx} | {v} | {x['off_ms']:.2f} | {x['taps']['mean']:.3f}x ± {x['taps']['se']:.3f} | "
                        f"**{x['on']['mean']:.3f}x** ± {x['on']['se']:.3f} | {verdict} |")
    return (f"Before = `{before['rev'][:8]}` ({before['subject']}), after = `{after['rev'][:8]}`"
            + (" plus uncommitted changes" if after.get("uncommitted") else "")
            + f"; measured together on {r['date']} ({r['cpus']} CPUs, torch {r['torch']}, one torch thread; "
            f"{r['shape']} shape, {r['dtype']}, full rows every {r['full_every']} rounds): {r['blocks']} paired blocks "
            f"of {r['rounds_per_block']} rounds per mode and version, the two versions in two processes alternated "
            "block by block, each against its own capture-off rounds (mean ratio ± its standard error; "
            f"`python bench/bench_overhead.py --alternate {','.join(r['contexts'])} --against {before['rev'][:8]} "
            f"--reps {r['blocks']} --json bench/results/capture_overhead.json`).\n\n" + "\n".join(rows))


def series_at_zero(k: int) -> int:
    """How many series /metrics shows before the first request at depth K (the replay's and the worker's)."""
    import tempfile

    from prometheus_client.parser import text_string_to_metric_families

    from drifttool.monitor import replay_worker
    from drifttool.monitor.attach import worker_counters
    from drifttool.monitor.metrics import Aggregates, exposition

    labels = {"model_name": "m", "engine": "0", "drafter": "d"}
    with tempfile.TemporaryDirectory() as tmp:
        rep = Aggregates()
        replay_worker.counters_at_zero(rep, labels, k)
        rep.write(Path(tmp) / "run-replay.json")
        worker_counters(labels).write(Path(tmp) / "run-worker.json")
        fams = text_string_to_metric_families(exposition(Path(tmp), "run"))
        return sum(1 for f in fams for s in f.samples if not s.name.endswith("_created"))


def monitor_blocks(text: str, page: str = "docs/monitor.md") -> str:
    from drifttool.monitor.metrics import describe as series
    from drifttool.monitor.settings import describe as settings

    text = with_block(text, md_table(settings()), SETTINGS, page)
    text = with_block(text, md_table(series()), SERIES, page)
    text = with_block(text, f"**{series_at_zero(4)} series at K = 4**", COUNT, page)
    return with_block(text, overhead_blocks(ROOT / "bench" / "results" / "monitor_overhead.json"), OVERHEAD, page)


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def pages() -> dict[Path, str]:
    metrics = ROOT / "docs" / "metrics.md"
    out = {ROOT / "docs" / "cli.md": cli_page(),
           metrics: with_block(metrics.read_text(), metric_block(), page=_rel(metrics))}
    times = times_block(ROOT / "bench" / "results" / "first_hour.json")
    for page in (ROOT / "README.md", ROOT / "docs" / "getting_started.md"):
        out[page] = with_block(page.read_text(), times, TIMES, _rel(page))
    out[ROOT / "README.md"] = with_block(out[ROOT / "README.md"], overhead_blocks(
        ROOT / "bench" / "results" / "monitor_overhead.json"), OVERHEAD, "README.md")
    monitor = ROOT / "docs" / "monitor.md"
    out[monitor] = monitor_blocks(monitor.read_text(), _rel(monitor))
    bench = ROOT / "docs" / "benchmarks.md"
    out[bench] = with_block(bench.read_text(), capture_block(ROOT / "bench" / "results" / "capture_overhead.json"),
                            CAPTURE, _rel(bench))
    vllm = ROOT / "docs" / "vllm.md"
    out[vllm] = with_block(vllm.read_text(), study_block(ROOT / "bench" / "results" / "vllm_throughput.json"), STUDY,
                           _rel(vllm))
    return out


def main(argv: list[str]) -> int:
    stale = []
    try:
        generated = pages()  # every page checked before any is written
    except MarkerError as e:
        print(f"docs_gen: {e}", file=sys.stderr)
        return 2
    except (KeyError, TypeError, IndexError) as e:  # a results file of another shape: one line, nothing written
        print(f"docs_gen: a bench results file under bench/results/ lacks a field this page needs ({e!r}); rerun "
              "its bench or restore it from git", file=sys.stderr)
        return 2
    for path, text in generated.items():
        if path.is_file() and path.read_text() == text:
            continue
        if "--check" in argv:
            stale.append(str(path.relative_to(ROOT)))
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print(f"docs_gen: {', '.join(stale)} differ from what the code generates; run python scripts/docs_gen.py",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
