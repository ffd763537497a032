"""`drifttool` command line: capture, info, compare (+ demo, dashboard, zoo, check as they land)."""

from __future__ import annotations

import json
import sys

import typer

from .errors import DriftError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Measure attention drift in EAGLE-3 / EAGLE-3.1 drafters.")


def _console():
    from rich.console import Console

    return Console()


@app.command()
def capture(
    target: str = typer.Option(..., "--target", help="HF target model folder"),
    drafter: list[str] = typer.Option(..., "--drafter", help="[NAME=]DIR[?flag=value&...]; repeat for several"),
    probes: str = typer.Option(..., "--probes", help="probe suite (JSONL)"),
    out: str = typer.Option(..., "--out", help="trace folder NAME.drift"),
    depth: int = typer.Option(8, "--depth", help="speculation depth K"),
    mode: str = typer.Option("generate", "--mode", help="generate | teacher-forced"),
    override: list[str] = typer.Option([], "--override", help="flag=value applied to every drafter"),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens"),
    device: str = typer.Option("cpu", "--device"),
    dtype: str = typer.Option("float32", "--dtype"),
    sink: str = typer.Option("4", "--sink", help="first:N | pos:i,j | tok:id,... (';' to combine)"),
    seed: int = typer.Option(0, "--seed"),
    keep_rows: int = typer.Option(2, "--keep-rows", help="full attention rows sampled per prompt and drafter"),
    temperature: float = typer.Option(0.0, "--temperature"),
    limit: int | None = typer.Option(None, "--limit", help="only the first N prompts"),
    resume: bool = typer.Option(False, "--resume"),
    overwrite: bool = typer.Option(False, "--overwrite"),
    quiet: bool = typer.Option(False, "--quiet"),
):
    """Run target + drafters over a probe suite with capture hooks and write a trace."""
    from .capture import DrafterSpec, parse_overrides, run_capture
    from .sinks import SinkSpec

    common = parse_overrides(override)
    specs = [DrafterSpec.parse(d, common) for d in drafter]
    path = run_capture(target, specs, probes, out, depth=depth, mode=mode, max_new_tokens=max_new_tokens,
                       device=device, dtype=dtype, sink=SinkSpec.parse(sink), seed=seed, keep_rows=keep_rows,
                       temperature=temperature, resume=resume, overwrite=overwrite, limit=limit, progress=not quiet)
    typer.echo(f"trace written: {path}")


@app.command()
def info(trace: str = typer.Argument(..., help="NAME.drift folder"), as_json: bool = typer.Option(False, "--json")):
    """Describe a trace: status, target, drafters and their flags, capture settings, counts."""
    from .trace.reader import read_trace

    t = read_trace(trace)
    m = t.manifest
    if as_json:
        typer.echo(json.dumps(m, indent=2, default=str))
        return
    c = _console()
    c.print(f"[bold]{t.path}[/bold]  schema {m['schema_version']}  status [bold]{m['status']}[/bold]  "
            f"prompts {m.get('counts', {}).get('prompts', 0)}  rounds {m.get('counts', {}).get('rounds', 0)}")
    tg = m.get("target", {})
    c.print(f"target: {tg.get('path')}  layers={tg.get('num_layers')} hidden={tg.get('hidden_size')} "
            f"aux={tg.get('aux_layer_ids')}")
    rep = tg.get("report")
    if isinstance(rep, dict) and rep.get("sink"):
        c.print(f"  sink provenance: {rep.get('sink')}")
    cap = m["capture"]
    c.print(f"capture: depth={cap.get('depth')} mode={cap.get('mode')} sink={cap.get('sink')} seed={cap.get('seed')} "
            f"dtype={cap.get('dtype')} probes={cap.get('probes', {}).get('path')}")
    for d in m["drafters"]:
        ov = f" overrides={d['overrides']}" if d.get("overrides") else ""
        c.print(f"drafter {d['name']}: layout={d.get('layout')} variant={d.get('variant')} flags={d.get('flags')}{ov}")
        for k, v in (d.get("assumptions") or {}).items():
            c.print(f"    assumed {k}: {v}")
    for tab in ("rounds", "depths", "heads"):
        t.table(tab)  # validates every listed shard is readable
    c.print("tables: all listed shards readable")


@app.command()
def compare(
    traces: list[str] = typer.Argument(..., help="two or more NAME.drift folders (or one with several drafters)"),
    as_json: bool = typer.Option(False, "--json"),
    bins: int = typer.Option(4, "--bins", help="quantile bins for the rejection predictors"),
):
    """EAGLE-3 vs 3.1 side by side: per-depth masses, feature RMS, acceptance (95% CIs over prompts)."""
    from .compare import Comparison
    from .trace.reader import read_trace

    cmp = Comparison.of([read_trace(t) for t in traces])
    if as_json:
        typer.echo(json.dumps(cmp.to_json(), indent=1, default=str))
        return
    from .report import print_comparison

    print_comparison(_console(), cmp, bins)


@app.command()
def demo(
    out: str = typer.Option("runs/demo.drift", "--out"),
    specimen: str = typer.Option("sink", "--specimen", help="sink (target trained with a BOS sink) | plain"),
    suite: str = typer.Option("quick", "--suite", help="probe suite under probes/ (quick, long_code, ...)"),
    depth: int = typer.Option(8, "--depth"),
    max_new_tokens: int = typer.Option(32, "--max-new-tokens"),
    quiet: bool = typer.Option(False, "--quiet"),
):
    """Capture EAGLE-3, EAGLE-3.1 and EAGLE-3 + norm_output on the bundled models; print the comparison."""
    from .compare import Comparison
    from .demo import run_demo
    from .report import print_comparison
    from .trace.reader import read_trace

    path = run_demo(out, specimen, suite, depth, max_new_tokens, progress=not quiet)
    print_comparison(_console(), Comparison.of([read_trace(path)]), context=True)
    typer.echo(f"trace: {path}\nopen the dashboard: drifttool dashboard {path}")


def main(argv: list[str] | None = None) -> int:
    """Entry point: user errors print one line and exit 2; Ctrl-C keeps completed work."""
    try:
        app(args=argv, standalone_mode=False)
    except DriftError as e:
        print(f"drifttool: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("drifttool: interrupted; completed prompts are saved (trace marked partial); rerun with --resume",
              file=sys.stderr)
        return 130
    except Exception as e:  # click usage errors carry their own exit code
        import click

        if isinstance(e, click.exceptions.Exit):
            return e.exit_code
        if isinstance(e, click.ClickException):
            print(f"drifttool: error: {e.format_message()}", file=sys.stderr)
            return 2
        if isinstance(e, click.exceptions.Abort):
            return 130
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
