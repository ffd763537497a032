"""`drifttool` command line: capture, info, compact, compare, dashboard (+ demo, zoo, check as they land)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from .dashboard.command import ORIGIN_GUARD, STREAMLIT_MIN, dashboard_command, dashboard_script, origin_guard  # noqa: F401 - public here too
from .errors import DriftError
from .jsonfile import dumps_strict
from .run.engines import ENGINES

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None,  # plain help: readable at 80 columns and when piped (issue 53)
                  help="Measure attention drift in EAGLE-3 / EAGLE-3.1 drafters.")


class HelpSections(typer.core.TyperCommand):
    """Plain --help with the options grouped under their `rich_help_panel` heading (the first one seen first),
    and a short metavar where none is given (TRACE, N, TEXT; never typer's `<str>` / `<list[str]>`)."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        for param in self.params:
            if param.metavar is not None or getattr(param, "is_flag", False):
                continue
            if param.param_type_name == "argument":
                param.metavar = param.name.upper()
            else:
                kind = param.bare_type() if hasattr(param, "bare_type") else ""
                param.metavar = {"int": "N", "float": "X"}.get(kind.removeprefix("list[").rstrip("]"), "TEXT")

    def format_options(self, ctx, formatter) -> None:
        groups: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            row = param.get_help_record(ctx)
            if row is None:
                continue
            if param.param_type_name == "argument":  # TRACES..., not typer's `traces... <list[str]>`
                groups.setdefault("Arguments", []).append((param.metavar + ("..." if param.nargs != 1 else ""),
                                                           row[1]))
            else:
                groups.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(row)
        for name, rows in groups.items():
            with formatter.section(name):
                formatter.write_dl(rows)


def _console():
    from rich.console import Console

    return Console()


def _suite(probes: str) -> str:
    """A probe-suite path, or a bundled suite by name (--probes long_code, --probes real/doc_qa)."""
    if Path(probes).exists():
        return probes
    from .demo import bundled_names, bundled_suite

    found = bundled_suite(probes)
    if found is None and not probes.endswith(".jsonl"):  # a name, mistyped? (a missing .jsonl path: load_suite)
        from .suggest import closest

        names = bundled_names()
        close = closest(probes, names)
        hint = f"did you mean {close!r}? " if close else ""
        raise DriftError(f"--probes {probes!r}: no such file and no bundled suite of that name; {hint}bundled: "
                         f"{', '.join(n for n in names if n.count('/') < 2)}, ... (or a JSONL path)")
    return str(found or probes)


def _no_hf_progress_bars() -> None:
    """stderr stays ours (the progress display, or one line per error): no transformers loading bars."""
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    else:  # read when transformers is first imported; importing it here would slow every error path
        import os

        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


CAPTURE_EXAMPLE = """\b
Example (the bundled SmolLM2 drafters; `drifttool zoo fetch smollm2` once):
  drifttool capture --target ~/.cache/drifttool/smollm2-135m-instruct \\
    --drafter eagle3=drifttool/zoo/models/smollm2/eagle3 \\
    --drafter eagle3.1=drifttool/zoo/models/smollm2/eagle3.1 \\
    --probes real/long_code --out runs/long_code.drift
Options: docs/cli.md; settings explained: docs/metrics.md"""
IN, OUT, DEC, MEAS, ENG = "Inputs", "Output", "Decoding", "Measurement", "Engine and device"
JSON_HELP = "print JSON instead of text (strict JSON: a value that cannot be computed, NaN or infinite, is null)"
# the options `capture` and `patch` share (one declaration each; typer reads them, never changes them)
LIMIT_OPT = typer.Option(None, "--limit", metavar="N", rich_help_panel=IN, help="only the first N prompts")
OUT_OPT = typer.Option(None, "--out", metavar="NAME.drift", rich_help_panel=OUT,
                       help="the trace folder to write  [required]")
RESUME_OPT = typer.Option(False, "--resume", rich_help_panel=OUT,
                          help="continue the partial trace at --out (same settings)")
OVERWRITE_OPT = typer.Option(False, "--overwrite", rich_help_panel=OUT, help="replace the trace at --out")
QUIET_OPT = typer.Option(False, "--quiet", rich_help_panel=OUT, help="no progress display")


@app.command(cls=HelpSections, epilog=CAPTURE_EXAMPLE,
             short_help="Capture target + drafters over a probe suite into a trace.")
# long: one typer option per line (the CLI's declaration), no logic
def capture(
    target: str | None = typer.Option(None, "--target", metavar="DIR", rich_help_panel=IN,
                                      help="target model folder (or hub id org/name)  [required]"),
    drafter: list[str] = typer.Option([], "--drafter", metavar="[NAME=]DIR", rich_help_panel=IN,
                                      help="drafter folder, optional ?flag=value&...; repeatable  [required, or "
                                           "--drafter-series]"),
    drafter_series: list[str] = typer.Option(
        [], "--drafter-series", metavar="DIR", rich_help_panel=IN,
        help="a folder of step-N checkpoints: one drafter per checkpoint, named VARIANT@STEP "
             "(docs/training_drift.md)"),
    series_keep: int | None = typer.Option(None, "--series-keep", min=2, metavar="N", rich_help_panel=IN,
                                           help="at most N evenly spaced checkpoints per variant"),
    probes: str | None = typer.Option(None, "--probes", metavar="SUITE", rich_help_panel=IN,
                                      help="JSONL file, or a bundled suite: long_code, quick, real/long_code, ... "
                                           " [required]"),
    limit: int | None = LIMIT_OPT,
    out: str | None = OUT_OPT,
    resume: bool = RESUME_OPT,
    overwrite: bool = OVERWRITE_OPT,
    no_compact: bool = typer.Option(False, "--no-compact", rich_help_panel=OUT,
                                    help="keep one shard per prompt (skip the final merge)"),
    quiet: bool = QUIET_OPT,
    depth: int = typer.Option(8, "--depth", metavar="K", rich_help_panel=DEC, help="speculation depth"),
    mode: str = typer.Option("generate", "--mode", metavar="MODE", rich_help_panel=DEC,
                             help="generate | teacher-forced"),
    max_new_tokens: int | None = typer.Option(
        None, "--max-new-tokens", metavar="N", rich_help_panel=DEC,
        help="new tokens per prompt, for every probe (default: the probe's, else 64)"),
    temperature: float = typer.Option(0.0, "--temperature", metavar="T", rich_help_panel=DEC,
                                      help="target sampling temperature (0: greedy)"),
    draft_sampling: str = typer.Option("greedy", "--draft-sampling", metavar="RULE", rich_help_panel=DEC,
                                       help="with --temperature > 0: greedy (vLLM's default) | probabilistic"),
    seed: int = typer.Option(0, "--seed", metavar="N", rich_help_panel=DEC, help="seed of sampling and row choice"),
    override: list[str] = typer.Option([], "--override", metavar="FLAG=V", rich_help_panel=DEC,
                                       help="a drafter flag set on every drafter (its own ?flag=value wins)"),
    tree: str | None = typer.Option(None, "--tree", metavar="SPEC", rich_help_panel=DEC,
                                    help="draft trees: dynamic:top_k=K,depth=D,total=N or rank paths "
                                         "(docs/trees.md)"),
    sink: str = typer.Option("auto", "--sink", metavar="RULE", rich_help_panel=MEAS,
                             help="auto (the target's own sink, else the first 4 positions) | target | first:N | "
                                  "pos:i,j | tok:id,...; ';' combines"),
    recent: int = typer.Option(32, "--recent", metavar="R", rich_help_panel=MEAS,
                               help="the recent mass: the last R context slots (sinks excluded)"),
    keep_rows: int = typer.Option(2, "--keep-rows", metavar="N", rich_help_panel=MEAS,
                                  help="full attention rows kept per prompt and drafter"),
    full_every: int = typer.Option(16, "--full-every", metavar="N", rich_help_panel=MEAS,
                                   help="entropy and head maxima every Nth round (1: every round, 0: sampled "
                                        "rows only)"),
    engine: str = typer.Option("hf", "--engine", metavar="NAME", rich_help_panel=ENG,
                               help=" | ".join(ENGINES) + " (hf: drifttool's own loop; vllm: a real vLLM run, "
                                    "replayed; docs/vllm.md)"),
    vllm_arg: list[str] = typer.Option([], "--vllm-arg", metavar="KEY=V", rich_help_panel=ENG,
                                       help="passed to vllm.LLM (--engine vllm)"),
    device: str = typer.Option("cpu", "--device", metavar="DEV", rich_help_panel=ENG, help="cpu | cuda[:N] | mps"),
    device_map: str | None = typer.Option(None, "--device-map", metavar="MAP", rich_help_panel=ENG,
                                          help="auto | balanced | sequential: the target over several GPUs (hf)"),
    dtype: str = typer.Option("float32", "--dtype", metavar="DTYPE", rich_help_panel=ENG,
                              help="float32 | bfloat16 | float16 (target and drafters)"),
    ray: str | None = typer.Option(None, "--ray", metavar="ADDRESS", rich_help_panel=ENG,
                                   help="share the prompts over a Ray cluster's workers (hf): an address, or local "
                                        "(needs the ray extra; docs/scale.md)"),
    ray_workers: int = typer.Option(2, "--ray-workers", metavar="N", min=1, rich_help_panel=ENG,
                                    help="Ray workers (each loads the models once; --ray)"),
):
    """Run target + drafters over a probe suite with capture hooks and write a trace."""
    from .run.drafter_specs import DrafterSpec, parse_overrides
    from .run.engines import engine as engine_named
    from .trace.sinks import SinkSpec

    missing = [flag for flag, given in (("--target", target), ("--drafter (or --drafter-series)",
                                                               drafter or drafter_series),
                                          ("--probes", probes), ("--out", out)) if not given]
    if missing:  # every one named at once (click stops at the first)
        raise DriftError(f"capture: missing {', '.join(missing)}; e.g. drifttool capture --target DIR "
                         "--drafter DIR --probes long_code --out runs/x.drift (drifttool capture --help)")
    _no_hf_progress_bars()

    common = parse_overrides(override)
    specs = [DrafterSpec.parse(d, common) for d in drafter]
    if drafter_series:  # one drafter per checkpoint, named VARIANT@STEP (run/series.py)
        from .run.series import series_specs

        for root in drafter_series:
            specs += [DrafterSpec(name, path, dict(common)) for name, path in series_specs(root, series_keep)]
    if not specs:
        raise DriftError("capture: no drafter; give --drafter DIR (repeatable) or --drafter-series DIR")
    probes = _suite(probes)
    eng = engine_named(engine)  # the engine declares which of these options it takes (run/engines)
    options = {"device_map": device_map, "tree": tree, "compact": False if no_compact else None,
               "engine_args": list(vllm_arg) or None, "ray": ray, "ray_workers": ray_workers if ray else None}
    path = eng.run(target, specs, probes, out, depth=depth, mode=mode, max_new_tokens=max_new_tokens,
                   device=device, dtype=dtype, sink=SinkSpec.parse(sink), seed=seed, keep_rows=keep_rows,
                   temperature=temperature, resume=resume, overwrite=overwrite, limit=limit, progress=not quiet,
                   draft_sampling=draft_sampling, full_every=full_every, recent=recent,
                   **{k: v for k, v in options.items() if v is not None})
    typer.echo(f"trace written: {path}")


@app.command(cls=HelpSections, short_help="Interventions on the drafter, paired round by round: what drift costs.")
# long: one typer option per line (the CLI's declaration), no logic
def patch(
    target: str | None = typer.Option(None, "--target", metavar="DIR", rich_help_panel=IN,
                                      help="target model folder (or hub id org/name)  [required]"),
    drafter: list[str] = typer.Option([], "--drafter", metavar="[NAME=]DIR", rich_help_panel=IN,
                                      help="drafter folder, optional ?flag=value&...; repeatable  [required]"),
    probes: str | None = typer.Option(None, "--probes", metavar="SUITE", rich_help_panel=IN,
                                      help="JSONL file, or a bundled suite  [required]"),
    site: list[str] = typer.Option([], "--site", metavar="SITE.OP[@K[-K2]][*S]", rich_help_panel=IN,
                                   help="an intervention, e.g. feedback.norm@2, feedback.rms1, feedback.teacher, "
                                        "aux.fc_norm, aux.zero-2, attention.recency@2, attention.sink, "
                                        "attention.own, attention.sinkhold (docs/patching.md); repeatable"),
    sites: str | None = typer.Option(None, "--sites", metavar="FILE", rich_help_panel=IN,
                                     help="interventions from a JSON file (a list of {site, op, lo, hi, strength})"),
    span: list[str] = typer.Option([], "--span", metavar="KIND:ARG", rich_help_panel=IN,
                                   help="a prompt span deleted from the drafter's context, e.g. turn:system, "
                                        "tail:1-8, template:<|im_end|>, sentence:system-1, tokens:0-3, text:STR; "
                                        "repeatable"),
    scan: bool = typer.Option(False, "--scan", rich_help_panel=IN,
                              help="also try every span found in the prompts (first token, template tokens, turns, "
                                   "system sentences, windows from the end) and rank them, Holm across spans"),
    scan_window: int = typer.Option(8, "--scan-window", metavar="W", rich_help_panel=IN,
                                    help="the scan's window length in tokens"),
    limit: int | None = LIMIT_OPT,
    out: str | None = OUT_OPT,
    resume: bool = RESUME_OPT,
    overwrite: bool = OVERWRITE_OPT,
    quiet: bool = QUIET_OPT,
    as_json: bool = typer.Option(False, "--json", rich_help_panel=OUT, help=JSON_HELP),
    depth: int = typer.Option(8, "--depth", metavar="K", rich_help_panel=DEC, help="speculation depth"),
    max_new_tokens: int | None = typer.Option(
        None, "--max-new-tokens", metavar="N", rich_help_panel=DEC,
        help="new tokens per prompt, for every probe (default: the probe's, else 64)"),
    override: list[str] = typer.Option([], "--override", metavar="FLAG=V", rich_help_panel=DEC,
                                       help="a drafter flag set on every drafter (its own ?flag=value wins)"),
    sink: str = typer.Option("auto", "--sink", metavar="RULE", rich_help_panel=MEAS,
                             help="auto | target | first:N | pos:i,j | tok:id,...; ';' combines"),
    keep_rows: int = typer.Option(0, "--keep-rows", metavar="N", rich_help_panel=MEAS,
                                  help="full attention rows kept per prompt and series"),
    device: str = typer.Option("cpu", "--device", metavar="DEV", rich_help_panel=ENG, help="cpu | cuda[:N] | mps"),
    dtype: str = typer.Option("float32", "--dtype", metavar="DTYPE", rich_help_panel=ENG,
                              help="float32 | bfloat16 | float16 (target and drafters)"),
):
    """Run every drafter clean and under each intervention on the same prompts, paired round by round (the target's
    greedy continuation fixed; each intervened round starts where its clean round did), write one trace, and say
    what each intervention changes in acceptance and in the drift quantities (docs/patching.md)."""
    from .run.drafter_specs import DrafterSpec, parse_overrides
    from .run.interventions import Intervention, from_file, parse
    from .trace.sinks import SinkSpec

    missing = [flag for flag, given in (("--target", target), ("--drafter", drafter), ("--probes", probes),
                                        ("--out", out), ("--site (or --sites, --span, --scan)",
                                                         site or sites or span or scan)) if not given]
    if missing:
        raise DriftError(f"patch: missing {', '.join(missing)}; e.g. drifttool patch --target DIR --drafter DIR "
                         "--probes long_code --site feedback.norm@2 --out runs/p.drift (drifttool patch --help)")
    ivs = ([parse(x) for x in site] + (from_file(sites) if sites else [])  # checked before anything loads
           + [Intervention("prompt", "delete", span=x) for x in span])
    if scan and scan_window < 1:
        raise DriftError(f"--scan-window {scan_window}: expected a window of at least 1 token")
    common = parse_overrides(override)
    specs = [DrafterSpec.parse(d, common) for d in drafter]
    sink_ = SinkSpec.parse(sink)
    _no_hf_progress_bars()
    from .analysis.patching import answer, effects_json
    from .run.engines.patch import run_patch
    from .trace.reader import read_trace

    path = run_patch(target, specs, _suite(probes), out, ivs, depth=depth, max_new_tokens=max_new_tokens,
                     device=device, dtype=dtype, sink=sink_, keep_rows=keep_rows, resume=resume,
                     overwrite=overwrite, limit=limit, progress=not quiet, scan=scan_window if scan else None)
    t = read_trace(path)
    if as_json:
        typer.echo(dumps_strict({"trace": str(path), "patch": effects_json(t)}, indent=1))
        return
    for line in answer(t):
        typer.echo(f"- {line}")
    typer.echo(f"trace written: {path}   (drifttool compare {path}: every table; the clean and intervened passes "
               "are series of it)")


@app.command(cls=HelpSections, short_help="Describe a trace and check that its files read.")
def info(trace: str = typer.Argument(..., help="NAME.drift folder"), as_json: bool = typer.Option(False, "--json", help=JSON_HELP)):
    """Describe a trace: status, target, drafters and their flags, capture settings, counts."""
    from .trace.reader import read_trace

    t = read_trace(trace)
    m = t.manifest
    if as_json:
        typer.echo(dumps_strict(m, indent=2))
        return
    c = _console()
    from rich.markup import escape

    # manifest values are data: printed without markup, so a name like "[/x]" is text, not a rich tag
    flagged = f" [bold red]FLAGGED ({len(m['flags'])} prompts)[/bold red]" if m.get("flags") else ""
    c.print(f"[bold]{escape(str(t.path))}[/bold]  schema {m['schema_version']}  status [bold]{escape(m['status'])}[/bold]"
            f"{flagged}  "
            f"prompts {escape(str(m.get('counts', {}).get('prompts', 0)))}  "
            f"rounds {escape(str(m.get('counts', {}).get('rounds', 0)))}")
    from .analysis.compare import flag_notes

    for line in flag_notes(m, t.path.name):  # a prompt whose numbers do not describe the engine's run
        c.print(f"[bold red]{escape(line)}[/bold red]", emoji=False)
    tg = m.get("target", {})
    from .trace.describe import flags_on_text, overrides_text, sink_text, tree_text, value_text

    c.print(f"target: {tg.get('path')}  layers={tg.get('num_layers')} hidden={tg.get('hidden_size')} "
            f"aux={value_text(tg.get('aux_layer_ids'))}", markup=False)
    rep = tg.get("report")
    if isinstance(rep, dict) and rep.get("sink"):
        c.print(f"  sink provenance: {value_text(rep.get('sink'))}", markup=False)
    cap = m["capture"]
    if cap.get("sink_rule"):  # auto / target: which positions the sink mass sums over, and why
        c.print(f"  sink rule: {cap.get('sink_rule')}", markup=False)
    c.print(f"capture: depth={cap.get('depth')} mode={cap.get('mode')} sink: {sink_text(cap.get('sink'))}; "
            f"seed={cap.get('seed')} "
            f"dtype={cap.get('dtype')} probes={cap.get('probes', {}).get('path')}"
            + (f" temperature={cap.get('temperature')} draft_sampling={cap.get('draft_sampling')}"
               if cap.get("draft_sampling") else "")
            + (f" tree={tree_text(cap['tree'])}" if cap.get("tree") else ""), markup=False)
    for d in m["drafters"]:
        ov = f"; overridden: {overrides_text(d['overrides'])}" if d.get("overrides") else ""
        c.print(f"drafter {d['name']}: layout={d.get('layout')} variant={d.get('variant')} "
                f"flags on: {flags_on_text(d.get('flags'), 'none')}{ov}", markup=False)
        if "aux_convention" in d or d.get("sliding_window"):
            c.print(f"    aux layer ids {value_text(d.get('aux_layer_ids'))} read as layer "
                    f"{d.get('aux_convention', 'input')}s (target hidden_states {value_text(d.get('aux_layer_ids_read'))}); "
                    f"sliding window {d.get('sliding_window') or 'none'}", markup=False)
        for k, v in (d.get("assumptions") or {}).items():
            c.print(f"    assumed {k}: {value_text(v)}", markup=False)
    from .trace.schema import SUMMARIES, TABLES

    for tab in [*TABLES, *SUMMARIES]:
        t.table(tab)  # validates every listed file: readable, typed, values in range
    n_rows = t.check_rows()
    for note in t.notes:
        c.print(f"note: {note}", markup=False)
    c.print(f"tables: all listed shards readable and valid; {n_rows} sampled attention rows readable")


@app.command(cls=HelpSections, short_help="Merge a trace's shards into one file per table.")
def compact(traces: list[str] = typer.Argument(..., help="NAME.drift folders to rewrite in the compact form")):
    """Merge a trace's shards into one file per table and migrate an old schema (in place, crash-safe)."""
    from .trace.compact import compact_trace

    for t in traces:
        r = compact_trace(t)
        mb = lambda b: f"{b / 1e6:.2f} MB"  # noqa: E731
        typer.echo(f"{r['path']}: {mb(r['bytes_before'])} in {r['files_before']} files -> {mb(r['bytes_after'])} "
                   f"in {r['files_after']} files (schema {r['schema_version']}, {r['shards']} shards)")


@app.command(cls=HelpSections, short_help="EAGLE-3 vs 3.1: the answer in words, then the tables.")
def compare(
    traces: list[str] = typer.Argument(..., help="two or more NAME.drift folders (or one with several drafters)"),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    bins: int = typer.Option(4, "--bins", help="quantile bins for the rejection predictors"),
    breakeven: float | None = typer.Option(None, "--breakeven",
                                           help="break-even acceptance length (default 1 + K*c from measured timing)"),
    trained_window: int | None = typer.Option(
        None, "--trained-window", min=1,
        help="context length the drafters were trained at (default: their config's trained_window, else "
             "rope_scaling.original_max_position_embeddings, else max_position_embeddings, flagged as assumed)"),
    pool: bool = typer.Option(False, "--pool", help="a live monitor folder as one trace of all its segments "
                              "(default: each segment its own trace)"),
):
    """EAGLE-3 vs 3.1 side by side: per-depth masses, feature RMS, acceptance (95% CIs over groups of prompts)."""
    from .analysis.compare import Comparison
    from .analysis.export import comparison_json

    datas = read_traces(traces, pool)
    if any(d.is_tree for d in datas):  # draft trees: per depth, main path vs side branches (docs/trees.md)
        from .analysis.tree_compare import render_tree_table, tree_depth_table, tree_verdicts

        for flag, val in (("--trained-window", trained_window), ("--breakeven", breakeven)):
            if val is not None:
                raise DriftError(f"{flag}: applies to chain traces; tree traces have no per-chain window split or "
                                 "break-even analysis")
        tab = tree_depth_table(datas)
        verdicts = tree_verdicts(datas)
        if as_json:
            typer.echo(dumps_strict({"tree_depths": tab.to_dict(orient="records"),
                                     "tree_verdicts": verdicts.to_dict(orient="records")}, indent=1))
        else:
            for r in verdicts.itertuples():  # the drift verdict over every node, as a chain's (docs/trees.md)
                at = f" at depth{'' if str(r.drift_depths).isdigit() else 's'} {r.drift_depths}" \
                    if r.drift_verdict == "drift" else ""
                typer.echo(f"{r.trace} / {r.drafter}: {r.drift_verdict}{at}: {r.drift_why}")
            render_tree_table(_console(), tab)
        return
    cmp = Comparison.of(datas, trained_window=trained_window)
    patched = [t for t in datas if t.manifest.get("patch")]  # drifttool patch traces: what each intervention does
    if as_json:
        from .analysis.patching import effects_json

        out = comparison_json(cmp, breakeven=breakeven)
        if patched:
            out["patch"] = {str(t.path): effects_json(t) for t in patched}
        typer.echo(dumps_strict(out, indent=1))
        return
    from .analysis.report import print_comparison

    if patched:
        from .analysis.patching import answer as patch_answer

        typer.echo("What each intervention changes (drifttool patch; paired round by round, tested over groups):")
        for t in patched:
            for line in patch_answer(t):
                typer.echo(f"- {line}")
        typer.echo("")
    print_comparison(_console(), cmp, bins, breakeven=breakeven)


@app.command(cls=HelpSections, short_help="Does an engine run this drafter as it was trained?")
def conform(
    drafter: str = typer.Argument(..., help="drafter checkpoint folder"),
    target: str = typer.Option(..., "--target", help="target folder (or hub id in the local cache)"),
    probes: str = typer.Option("quick", "--probes", help="probe suite (JSONL) or a bundled one by name"),
    engine: str = typer.Option("hf", "--engine", help=" | ".join(ENGINES)),
    depth: int = typer.Option(4, "--depth", metavar="K", help="speculation depth"),
    max_new_tokens: int = typer.Option(32, "--max-new-tokens", help="new tokens per prompt"),
    limit: int | None = typer.Option(4, "--limit", help="only the first N prompts"),
    engine_override: list[str] = typer.Option([], "--engine-override",
                                              help="flag=value: load the checkpoint differently on the engine side "
                                                   "(a planted misread; hf engine)"),
    vllm_arg: list[str] = typer.Option([], "--vllm-arg", help="key=value passed to vllm.LLM (--engine vllm)"),
    out: str | None = typer.Option(None, "--out", help="keep the engine's trace here"),
    dtype: str = typer.Option("float32", "--dtype", metavar="DTYPE", help="float32 | bfloat16 | float16"),
    device: str = typer.Option("cpu", "--device", metavar="DEV", help="cpu | cuda[:N] | mps"),
    diagnose: bool = typer.Option(True, "--diagnose/--no-diagnose", help="on disagreement, find the reading that reproduces the engine"),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
):
    """Is the engine running this drafter as it was trained? Static checks of config against weights, the
    engine's drafts against drifttool's reference per depth, a diagnosis of the misread. Exit 1 when not
    conformant (for CI gates)."""
    from .run.conform import conform as run_conform
    from .run.conform import render
    from .run.drafter_specs import parse_overrides
    from .run.preflight import check_model_folder

    # a missing folder is a usage error (exit 2, one line), not a finding: it printed "NOT conformant" (exit 1)
    check_model_folder(target, "target", "--target")
    check_model_folder(drafter, "drafter", "DRAFTER")
    _no_hf_progress_bars()
    probes = _suite(probes)
    options = {"engine_args": list(vllm_arg)} if vllm_arg else {}
    from .run.progress import still_running

    with still_running("conform"):  # a line every 30 s: its engine run and diagnosis take minutes
        rep = run_conform(drafter, target, probes, engine, depth=depth, max_new_tokens=max_new_tokens, limit=limit,
                          engine_overrides=parse_overrides(engine_override, "--engine-override"), engine_options=options, out=out,
                          device=device, dtype=dtype, run_diagnosis=diagnose)
    typer.echo(dumps_strict(rep.to_dict(), indent=1) if as_json else render(rep))
    if not rep.conformant:
        raise typer.Exit(1)


@app.command(cls=HelpSections, short_help="One offline HTML file: the verdict, charts and tables.")
def report(
    traces: list[str] = typer.Argument(..., help="NAME.drift folder(s)"),
    out: str = typer.Option("report.html", "-o", "--out", help="the HTML file to write"),
    title: str = typer.Option("drifttool report", "--title", help="the page's title"),
    images: str = typer.Option(None, "--images", help="also write each chart as a file into this folder "
                               "(needs the export extra: kaleido)"),
    image_format: str = typer.Option("png", "--image-format", help="png or svg"),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace an existing output file"),
):
    """One self-contained HTML file (opens offline, no server): the verdict, the dashboard's charts and tables."""
    from .plots.html_report import html_report
    from .trace.reader import read_trace

    p = output_file(out, overwrite, "-o")  # checked before any work: a trace's own files are never replaced
    if p.suffix.lower() not in (".html", ".htm"):  # before minutes of rendering (-o r.pdf rendered HTML into it)
        raise DriftError(f"-o {out}: the report is one HTML file; give a name ending in .html (for image files of "
                         "the charts use --images DIR)")
    if images is not None:
        from .plots.images import FORMATS

        if image_format not in FORMATS:
            raise DriftError(f"--image-format {image_format!r}: expected one of {', '.join(FORMATS)}")
        output_folder(images, overwrite, "--images", f"[0-9][0-9]_*.{image_format}")
    from .run.progress import still_running

    data = [read_trace(t) for t in traces]
    with still_running("report") as beat:  # a line every 30 s: a large trace's report renders for minutes
        beat.stage = "rendering the HTML"
        text = html_report(data, title)
    try:
        p.write_text(text, encoding="utf-8")
    except OSError as e:
        raise DriftError(f"{p}: cannot write ({e.strerror})") from None
    typer.echo(f"report written: {p.resolve()} ({len(text) // 1024} KiB)")
    if images is not None:
        from .plots.images import export_images

        with still_running("report") as beat:
            beat.stage = "writing the chart images"
            files = export_images(data, images, image_format)
        typer.echo(f"{len(files)} charts written to {images}/ ({image_format})")


def output_file(out: str, overwrite: bool, flag: str) -> Path:
    """The one guard for a file a verb writes: never inside a trace folder (`-o T.drift/manifest.json` made the
    trace unreadable), never a folder, and an existing file only with --overwrite. Guarded by what the target is,
    not by its name: links resolved, and a folder is a trace's when it is named NAME.drift or holds a trace's
    manifest.json (a renamed trace, a link into one)."""
    p = Path(out)
    if not p.parent.is_dir():  # before any rendering: a report used to be built, then refused
        from .suggest import path_hint

        what = "is not a folder" if p.parent.exists() else "does not exist"
        raise DriftError(f"{flag} {out}: the folder {p.parent} {what}{path_hint(p.parent)}; create it or write "
                         "the file elsewhere")
    real = p.resolve()  # where the write lands: every link on the way followed
    inside = next((q for q in (p, *p.parents, real, *real.parents) if _is_trace_folder(q)), None)
    if inside is not None:
        raise DriftError(f"{flag} {out}: inside the trace folder {inside}; write the file elsewhere")
    if p.is_dir():
        raise DriftError(f"{flag} {out}: is a folder; expected a file path")
    if p.exists() and not overwrite:
        raise DriftError(f"{flag} {out}: exists; add --overwrite to replace it")
    return p


def output_folder(folder: str, overwrite: bool, flag: str, pattern: str) -> Path:
    """output_file's guard for a folder a verb fills with files (`report --images`): never a trace folder or inside
    one (links resolved), not a file, and files of an earlier run there (`pattern`) replaced only with
    --overwrite."""
    p = Path(folder)
    real = p.resolve()
    inside = next((q for q in (p, *p.parents, real, *real.parents) if _is_trace_folder(q)), None)
    if inside is not None:
        raise DriftError(f"{flag} {folder}: inside the trace folder {inside}; write the files elsewhere")
    if p.exists() and not p.is_dir():
        raise DriftError(f"{flag} {folder}: is a file; expected a folder")
    earlier = sorted(p.glob(pattern)) if p.is_dir() else []
    if earlier and not overwrite:
        raise DriftError(f"{flag} {folder}: holds {len(earlier)} files of an earlier run (e.g. {earlier[0].name}); "
                         "add --overwrite to replace them, or give an empty folder")
    return p


def _is_trace_folder(q: Path) -> bool:
    """Named NAME.drift, or holding a trace's manifest.json (one with a schema_version, or one unreadable as JSON:
    a damaged trace is still a trace)."""
    if q.suffix == ".drift":
        return True
    mf = q / "manifest.json"
    try:
        if not mf.is_file():
            return False
        m = json.loads(mf.read_bytes())
    except (OSError, ValueError):
        return mf.exists()
    return isinstance(m, dict) and "schema_version" in m


@app.command(cls=HelpSections, short_help="How many groups would detect an effect of a given size.")
def plan(
    traces: list[str] = typer.Argument(..., help="pilot NAME.drift folder(s)"),
    metric: str = typer.Option(..., "--metric", help="a depth trend METRIC@depthN-depthM (e.g. "
                                                     "sink_mass@depth8-depth1) or acceptance_length"),
    effect: float = typer.Option(..., "--effect", help="the effect to detect, in the metric's units"),
    population: str = typer.Option("all", "--population", help="all | prefix_correct (trends only)"),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
):
    """How many groups (source documents) would detect an effect of this size, from a pilot trace's variance."""
    from .analysis.plan import plan_study
    from .analysis.stats import POPULATIONS
    from .trace.reader import read_trace

    if population not in POPULATIONS:
        raise DriftError(f"--population {population!r}: expected one of {', '.join(POPULATIONS)}")
    rows = plan_study([read_trace(t) for t in traces], metric, effect, population)
    if as_json:
        typer.echo(dumps_strict(rows, indent=1))
        return
    for r in rows:
        who = r["series"] + (f" vs {r['against']}" if "against" in r else "")
        need = r["groups_needed"]
        now = "inf" if r["mde_now"] == float("inf") else f"{r['mde_now']:.4g}"
        sd = "-" if r["sd"] != r["sd"] else f"{r['sd']:.4g}"
        typer.echo(f"{who}: {r['metric']}: pilot {r['n_groups']} groups, SD of group values {sd}, MDE now {now}; "
                   f"to detect {r['effect']:.4g} at 80% power (alpha 0.05): "
                   + (("unknown (the pilot has fewer than 2 groups with data)" if r["n_groups"] < 2 else
                       "more than 100,000 groups (no feasible study detects an effect this small)")
                      if need is None else f"{need} groups")
                   + (f" (the SD rests on {r['n_groups']} groups: a rough first estimate)"
                      if need is not None and r["n_groups"] < 6 else ""))


@app.command(cls=HelpSections, short_help="The answer on the bundled models, and proof this install reproduces it.")
def demo(
    out: str = typer.Option("runs/demo.drift", "--out", metavar="NAME.drift", help="the trace folder to write"),
    specimen: str = typer.Option("smollm2", "--specimen",
                                 help="smollm2 (the real pretrained target, natural sink) | sink | plain (tiny test models)"),
    suite: str | None = typer.Option(None, "--suite", help="capture this probe suite (quick, long_code, ...) and print "
                                     "its comparison instead of the shipped answer"),
    depth: int = typer.Option(8, "--depth", metavar="K", help="speculation depth (with --suite)"),
    max_new_tokens: int = typer.Option(32, "--max-new-tokens", help="new tokens per prompt (with --suite)"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress display"),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace a trace at --out that the demo did not write"),
):
    """The answer on the bundled models, then proof that this install reproduces it: the shipped traces' verdict in
    plain words (the same sentences as the README), then two of their prompts recaptured live with the bundled
    EAGLE-3 and EAGLE-3.1 and checked against the shipped rounds. With --suite: capture that suite (EAGLE-3,
    EAGLE-3.1 and EAGLE-3 + norm_output) and print its comparison."""
    from .demo import REAL, shipped_traces

    _no_hf_progress_bars()
    _demo_checks(out, specimen, suite or "quick", overwrite)  # before the target is fetched or anything loads
    if suite is None and specimen == REAL and shipped_traces():
        _demo_answer(out, quiet)
        return
    from .analysis.compare import Comparison
    from .analysis.report import print_comparison
    from .demo import run_demo
    from .trace.reader import read_trace

    path = run_demo(out, specimen, suite or "quick", depth, max_new_tokens, progress=not quiet)
    print_comparison(_console(), Comparison.of([read_trace(path)]), context=True)
    typer.echo(f"trace: {path}\nopen the dashboard: drifttool dashboard {path}")


def _demo_answer(out: str, quiet: bool) -> None:
    """The demo's answer mode: the shipped answer first, the live reproduction second (exit 1 when it fails)."""
    from . import demo as d

    typer.echo("The answer on the bundled models (SmolLM2-135M-Instruct with the EAGLE-3 and EAGLE-3.1 drafters "
               "trained for it; one checkpoint per variant), from the shipped traces:")
    for line in d.answer_lines():
        typer.echo(line)
    traces = [p for _, _, p in d.shipped_traces()]
    typer.echo(f"All the numbers: drifttool compare {d.shown_path(traces[0])}   (every table: docs/results.md)")
    typer.echo(f"\nChecking that this install reproduces them: {d.REPRODUCE_N} of the {d.REPRODUCE_SUITE} prompts captured "
               "live with both drafters under the shipped trace's settings ...")
    res = d.reproduce(out, progress=not quiet)
    if res["problems"]:
        typer.echo(f"NOT reproduced ({', '.join(res['prompts'])}): " + "; ".join(res["problems"]) + " (a different "
                   "torch build or CPU can flip a near-tie; compare the two traces to see where)", err=True)
        raise typer.Exit(1)
    typer.echo(f"reproduced: {len(res['prompts'])} prompts x 2 drafters, {res['rounds']} rounds: "
               f"{len(res['exact'])} integer columns identical (drafted tokens, acceptance, positions, key counts), "
               f"{len(res['compared'])} measured columns (every mass, entropy, RMS and L2) within "
               f"{res['worst_rel']:.1e} relative (tolerance {d.MASS_TOL:g})")
    typer.echo(f"live trace: {out}\nopen the dashboard on the shipped traces: drifttool dashboard")


def _demo_checks(out: str, specimen: str, suite: str, overwrite: bool = False) -> None:
    """The demo's names and output checked at the call: a mistyped specimen or suite gets the closest name; --out
    may replace a trace the demo wrote, another only with --overwrite, and never a shipped trace (the demo reads
    them as its reference)."""
    from .demo import REAL, SPECIMENS, probes_dir, shipped_traces
    from .run.preflight import check_out
    from .suggest import did_you_mean

    if specimen not in SPECIMENS:
        raise DriftError(f"--specimen {specimen!r}: expected one of {', '.join(SPECIMENS)}"
                         f"{did_you_mean(specimen, SPECIMENS)}")
    root = probes_dir() / ("real" if specimen == REAL else "")
    names = sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.jsonl"))
    if suite not in names:
        shown = [n for n in names if "/" not in n]
        raise DriftError(f"--suite {suite!r}: no such bundled suite{did_you_mean(suite, names)}; expected one of "
                         f"{', '.join(shown)}" + (", ..." if len(shown) < len(names) else ""))
    p = Path(out)
    shipped = {q.resolve() for _, _, q in shipped_traces()}
    if p.exists() and p.resolve() in shipped:
        raise DriftError(f"--out {out}: a shipped trace (the demo's reference); give another --out")
    mf = p / "manifest.json"
    if mf.is_file() and not overwrite:
        try:
            own = bool(json.loads(mf.read_text()).get("demo"))
        except (OSError, ValueError, AttributeError):
            own = False
        if not own:
            raise DriftError(f"--out {out}: a trace the demo did not write is there; give another --out, or "
                             "--overwrite to replace it")
    check_out(out, overwrite=True)  # the demo replaces its own trace


def read_traces(paths: list[str], pool: bool = False) -> list:
    """The given traces; a live monitor folder (DRIFTTOOL_MONITOR's dir=) gives its segments, or with `pool` one
    trace of all of them."""
    from .dashboard.live import is_live, live_segments, pooled
    from .trace.reader import read_trace

    out = []
    for p in paths:
        if is_live(Path(p)):
            if not live_segments(Path(p)):
                raise DriftError(f"{p}: a monitor folder without finished segments yet; nothing to compare")
            out += [pooled(Path(p))] if pool else [read_trace(s) for s in live_segments(Path(p))]
        else:
            out.append(read_trace(p))
    return out


@app.command(cls=HelpSections, short_help="Regression gate: exit 1 when a rule fails.")
def check(
    trace: str = typer.Argument(..., help="NAME.drift folder to gate"),
    rule: list[str] = typer.Option([], "--rule", help="METRIC[@depthN] OP NUMBER, e.g. 'acceptance_length>=2.0'"),
    baseline: str | None = typer.Option(None, "--baseline", help="baseline trace to compare against"),
    max_drop: str = typer.Option("2%", "--max-drop", help="allowed relative drop vs the baseline (2% or 0.02)"),
    baseline_metric: list[str] = typer.Option([], "--baseline-metric",
                                              help="metric compared with --baseline (default mean_acceptance_length)"),
    drafter: str | None = typer.Option(None, "--drafter", help="only this drafter of the trace"),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
):
    """Regression gate: exit 0 when every rule (and the baseline comparison) passes, 1 when any fails."""
    from .analysis.check import print_check, run_check
    from .trace.reader import read_trace

    rep = run_check(read_trace(trace), rule, read_trace(baseline) if baseline else None, max_drop,
                    baseline_metric, drafter)
    if as_json:
        typer.echo(dumps_strict(rep, indent=1))
    else:
        print_check(_console(), rep)
    if not rep["passed"]:
        raise typer.Exit(1)


@app.command(cls=HelpSections, short_help="Open the Streamlit dashboard on traces.")
def dashboard(
    traces: list[str] = typer.Argument(None, help="NAME.drift folders (default: the sample traces; an installed "
                                                  "wheel captures a demo trace on first use)"),
    port: int = typer.Option(8501, "--port", help="port to listen on"),
    host: str = typer.Option("127.0.0.1", "--host",
                             help="address to listen on: 127.0.0.1 (default, this machine only) or 0.0.0.0 / an "
                                  "interface address to reach a remote GPU box's dashboard (prefer an ssh tunnel)"),
    allow_host: list[str] = typer.Option(None, "--allow-host",
                                         help="a host name browsers use to reach this dashboard (repeatable); "
                                              "other Host/Origin headers are refused"),
):
    """Open the Streamlit dashboard on the given traces (reads only those folders)."""
    import os
    import subprocess

    if not traces:
        from .demo import REPO, sample_traces

        found = sample_traces(log=lambda m: typer.echo(m, err=True))
        # a checkout's own samples: let the app list them itself (its documented default); else name them
        traces = [] if found and found[0].parent == REPO / "sample_traces" else [str(p) for p in found]
    dashboard_command(traces, port, host, allow_host)  # port / host / app checked first
    if traces:  # say in the terminal what the page would say: on a remote box nobody watches the page
        from .dashboard.live import is_live
        from .trace.reader import read_manifest

        good = []
        for t in traces:
            if is_live(t):  # a live monitor folder: its segments, read afresh by the app
                good.append(t)
                continue
            try:
                read_manifest(t)
                good.append(t)
            except DriftError as e:
                typer.echo(f"dashboard: skipped {t}: {e}", err=True)
        if not good:
            raise DriftError("dashboard: none of the given traces can be read (above); nothing to show")
        traces = good
    cmd = dashboard_command(traces, port, host, allow_host)
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    # printed by the server process once its imports succeeded (drifttool/dashboard/serve.py): a dashboard that
    # fails to start says so and exits non-zero without having printed a URL
    os.environ["DRIFTTOOL_DASHBOARD_URL"] = f"dashboard: http://{shown}:{port}" + (
        f" (listening on {host}: reachable from other machines)" if host not in ("127.0.0.1", "localhost", "::1") else "")
    if os.name == "posix":
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(cmd[0], cmd)  # replace this process: signals reach streamlit directly
    raise typer.Exit(subprocess.call(cmd))


ZOO_HELP = """Usage: drifttool zoo fetch smollm2

  fetch smollm2   install + convert the real target, SmolLM2-135M-Instruct
                  (once; cached)

The trainers of the bundled models are project tooling, not part of the
installed package: from a checkout, `python -m training.build` (tiny models)
and scripts/train_real_drafters.sh (the SmolLM2 drafters).
"""


@app.command(name="zoo", short_help="Install the real target once: zoo fetch smollm2.",
             context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []})
def zoo(ctx: typer.Context, action: str = typer.Argument(None, help="fetch")):
    """`zoo fetch smollm2`: install + convert the real target (once, cached). Bare `zoo` (or `zoo --help`)
    prints this help."""
    if action in (None, "--help", "-h", "help"):  # bare `zoo`: help, never an action
        typer.echo(ZOO_HELP.rstrip())
        return
    if action == "fetch":
        names = list(ctx.args) or ["smollm2"]
        if names != ["smollm2"]:
            raise DriftError(f"zoo fetch {' '.join(names)}: unknown model; expected 'smollm2'")
        from .zoo import smollm2  # transformers' own progress bar shows the one-time de-quantisation

        print(smollm2.fetch(log=lambda m: print(m, file=sys.stderr, flush=True)))
        return
    if action == "build":
        raise DriftError("zoo build: the trainers are project tooling outside the installed package; from a "
                         "checkout run `python -m training.build` (options: --help)")
    raise DriftError(f"zoo {action!r}: unknown action; expected 'fetch' (drifttool zoo --help)")


def _interrupted() -> int:
    print("drifttool: interrupted; completed prompts are saved (trace marked partial); rerun with --resume",
          file=sys.stderr)
    return 130


def main(argv: list[str] | None = None) -> int:
    """Entry point: user errors print one line and exit 2; Ctrl-C keeps completed work."""
    try:
        # standalone_mode=False makes click *return* typer.Exit codes (e.g. `check`'s 1) instead of raising
        rc = app(args=argv, standalone_mode=False)
    except DriftError as e:
        print(f"drifttool: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return _interrupted()
    except Exception as e:  # click usage errors carry their own exit code
        # By class name: typer >= 0.26 raises its vendored click's classes (typer._click, typer.Exit/Abort),
        # which are not subclasses of the `click` package's; older typer raises click's own.
        kinds = {c.__name__ for c in type(e).__mro__}
        if "Exit" in kinds:
            return e.exit_code
        if "ClickException" in kinds:
            if e.format_message():  # empty for a bare `drifttool`, which has printed the help
                print(f"drifttool: error: {e.format_message()}", file=sys.stderr)
            return 2
        if "Abort" in kinds:  # click turns Ctrl-C (and our SIGTERM) into Abort
            return _interrupted()
        raise
    if rc == 130:  # typer turns Ctrl-C (and capture's SIGTERM) into a *returned* exit code 130
        return _interrupted()
    return rc if type(rc) is int else 0


if __name__ == "__main__":
    sys.exit(main())
