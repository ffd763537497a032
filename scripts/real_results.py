"""Print the README's real-target results (markdown) from sample_traces/smollm2-*.drift.

Tables: per suite x drafter (acceptance with 95% CIs over groups, sink / self mass and feature RMS by depth, the
prefix-correct rounds per depth); paired depth trends with p, MDE and verdict; acceptance length against EAGLE-3
paired over groups; the result sentences (generated, never typed);
acceptance inside vs beyond the drafters' trained window, paired per source document where one was cut both ways;
where heads look hardest at depth 1 and 8 and which measured quantity tracks rejections (mean rank correlation
over depths >= 2), pooled over the generate-mode suites and said so."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from drifttool.analysis.compare import Comparison
from drifttool.analysis.fmt import fmt_ci, fmt_mde, fmt_p, fmt_ratio
from drifttool.analysis.multiple import holm_rejected
from drifttool.analysis.pooling import by_drafter, pool_by_drafter
from drifttool.analysis.stats import min_p
from drifttool.trace import read_trace


def trained_window() -> int:
    """The shipped drafters' stated trained window (their config's trained_window)."""
    from drifttool.model.config import trained_window as tw
    from drifttool.zoo import MODELS_DIR

    cfg = json.loads((MODELS_DIR / "smollm2" / "eagle3" / "config.json").read_text())
    return int(tw(cfg)["window"])


TRAINED_WINDOW = trained_window()


def _traces(root: Path) -> list[tuple[str, str, Path]]:
    out = []
    for p in sorted([*root.glob("smollm2-*.drift"), *root.glob("chat/smollm2-*.drift"),
                     *root.glob("teacher_forced/smollm2-*.drift")], key=lambda p: p.name):
        suite = p.name.removesuffix(".drift").removeprefix("smollm2-")
        out.append((suite.removesuffix("-tf"), "teacher-forced" if suite.endswith("-tf") else "generate", p))
    return out


def per_suite(root: Path) -> None:
    print(
        "| suite | mode | drafter | groups / prompts | mean acc. length [95% CI] | acc. rate d1 | sink lift d1 → d8 |"
        " self lift d2 → d8 | sink mass d1 → d8 | self mass d2 → d8 | rms_in d1 → d8 | prefix-correct rounds d1 / d2 / "
        "d4 / d8 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for suite, mode, p in _traces(root):
        cmp = Comparison.of([read_trace(p)])
        s = cmp.summary().set_index("series")
        d = cmp.per_depth().set_index(["series", "depth"])
        pc = cmp.per_depth(population="prefix_correct").set_index(["series", "depth"])["n_rounds"]
        k = cmp.depth
        for n in s.index:
            r = s.loc[n]
            v = lambda m, i, n=n, d=d: d.loc[(n, i), m]  # noqa: E731
            npc = " / ".join(str(int(pc.get((n, i), 0))) for i in (1, 2, 4, k))
            print(
                f"| {suite} | {mode} | {n} | {int(r.groups)} / {int(r.prompts)} | "
                f"{fmt_ci(r.mean_acceptance_length, r.al_lo, r.al_hi)} | {v('acceptance_rate', 1):.3f} | "
                f"{v('sink_lift', 1):.2f} → {v('sink_lift', k):.2f} | {v('self_lift', 2):.1f} → {v('self_lift', k):.1f} | "
                f"{v('sink_mass', 1):.3f} → {v('sink_mass', k):.3f} | {v('self_mass', 2):.2f} → {v('self_mass', k):.2f} | "
                f"{v('rms_in', 1):.2f} → {v('rms_in', k):.2f} | {npc} |"
            )


def trends(root: Path) -> list[str]:
    """Paired depth trends (all rounds) at depth K per suite x mode x drafter; returns the detected ones."""
    print("\n| suite | mode | drafter | metric | from → d8 | change [95% CI] | p | MDE | groups | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    detected, tests = [], []
    for suite, mode, p in _traces(root):
        cmp = Comparison.of([read_trace(p)])
        tr = cmp.trends(populations=("all",))
        k = cmp.depth
        s1 = cmp.summary().set_index("series")["sink_lift_d1_hi"]  # no sink to leave: its CI not above uniform
        for r in tr[(tr.depth == k) & tr.metric.isin(["sink_lift", "self_lift", "rms_in"])].itertuples():
            dg = 1 if r.metric == "self_lift" else 2  # lifts: multiples of uniform
            ch = f"{r.change:+.{dg}f} [{r.change_lo:+.{dg}f}, {r.change_hi:+.{dg}f}]"
            print(f"| {suite} | {mode} | {r.series} | {r.metric} | {r.base_value:.{dg}f} (d{r.from_depth}) | {ch} | "
                  f"{fmt_p(r.p)} | {fmt_mde(r.mde, dg)} | {r.n_groups} | {r.verdict} |")
            tests.append(r)
            if r.verdict in ("rise", "fall"):
                floor = " — the smallest p that many groups allow" if abs(r.p - min_p(r.n_groups)) < 1e-12 else ""
                no_sink = r.metric == "sink_lift" and s1.get(r.series, float("nan")) <= 1.0
                detected.append(f"{r.series} {r.metric} {'rises' if r.change > 0 else 'falls'} by {r.change:+.{dg}f} "
                                f"from {r.base_value:.{dg}f} at depth {r.from_depth} to depth {k} ({suite}, {mode}; "
                                f"p {fmt_p(r.p)}, {r.n_groups} groups{floor}"
                                + ("; from no more than uniform: no sink to leave" if no_sink else "") + ")")
    return detected, tests


def between(root: Path) -> None:
    """Acceptance length of each drafter against EAGLE-3, paired over groups, per suite and mode."""
    print("\n| suite | mode | drafter vs eagle3 | acc. length (mean over groups) | difference [95% CI] | p | MDE | groups "
          "| verdict |")
    print("|---|---|---|---|---|---|---|---|---|")
    for suite, mode, p in _traces(root):
        cmp = Comparison.of([read_trace(p)])
        for r in cmp.acceptance_differences().itertuples():
            print(f"| {suite} | {mode} | {r.series} | {r.base_value + r.difference:.2f} vs {r.base_value:.2f} | "
                  f"{r.difference:+.2f} [{r.difference_lo:+.2f}, {r.difference_hi:+.2f}] | {fmt_p(r.p)} | "
                  f"{fmt_mde(r.mde, 2)} | {r.n_groups} | {r.verdict.replace('rise', 'higher').replace('fall', 'lower')} |")


def sentences(root: Path, detected: list[str], tests: list) -> None:
    """The README's result sentences, generated: groups, what is detectable, what is not."""
    n = {}
    for suite, mode, p in _traces(root):
        if mode == "generate":
            c = Comparison.of([read_trace(p)])
            n[suite] = (c.rounds["group"].nunique(), c.rounds["prompt_id"].nunique())
    sizes = ", ".join(f"{s} {g} groups / {q} prompts" for s, (g, q) in n.items())
    print(f"\n- Sample sizes: {sizes}. With fewer than 6 groups no sign-flip test can reach p < 0.05, so those "
          "suites can show no trend and no difference between drafters at all: every such verdict reads "
          "underpowered.")
    under = sum(t.verdict == "underpowered" for t in tests)
    keep = holm_rejected([t.p for t in tests])
    holm = sum(k and t.verdict in ("rise", "fall") for k, t in zip(keep, tests))
    print(f"- {len(tests)} depth-trend tests above (per-test alpha 0.05, uncorrected: about {0.05 * len(tests):.1f} "
          f"false detections expected if nothing changed); {under} of them are underpowered. Under Holm's "
          f"correction for all {len(tests)} tests (family-wise alpha 0.05), {holm} of the "
          f"{sum(t.verdict in ('rise', 'fall') for t in tests)} detected trends stay detected.")
    if detected:
        print("- Detected (p < 0.05, paired over groups, all rounds): " + "; ".join(detected) + ".")
    else:
        print("- Detected (p < 0.05, paired over groups, all rounds): nothing.")
    d1: dict[str, list[float]] = {}
    sinks = set()
    for _suite, mode, p in _traces(root):
        if mode != "generate":
            continue
        t = read_trace(p)
        sinks.add(sink_words(t.manifest["capture"]))
        pdp = Comparison.of([t]).per_depth()
        for r in pdp[pdp.depth == 1].itertuples():
            d1.setdefault(r.series, []).append(r.sink_lift)
    print(f"- Depth-1 sink lift (attention on {' / '.join(sorted(sinks))} / its uniform share; 1.0 = no more than "
          "uniform) over the generate-mode suites: " + "; ".join(f"{s} {min(v):.2f}–{max(v):.2f}" for s, v in d1.items())
          + ".")
    same = []
    for suite, mode, p in _traces(root):
        if mode != "teacher-forced" or (root / f"smollm2-{suite}.drift") not in [q for _, m, q in _traces(root)]:
            continue
        tf = Comparison.of([read_trace(p)]).summary().set_index("series")["mean_acceptance_length"]
        ge = Comparison.of([read_trace(root / f"smollm2-{suite}.drift")]).summary().set_index("series")
        if (abs(tf - ge["mean_acceptance_length"].reindex(tf.index)) < 1e-12).all():
            same.append(suite)
    if same:
        print(f"- {', '.join(same)}: teacher-forced and generate acceptance are equal, as they must be under greedy "
              "decoding (the same committed tokens and round boundaries; a chain is scored only up to its first "
              "wrong draft, where both modes still fed the same tokens); the modes differ in the masses measured "
              "after that draft.")
    gen = [t for t in _traces(root) if t[1] == "generate"]
    deep = []
    for suite, _, p in gen:
        c = Comparison.of([read_trace(p)])
        pc = c.per_depth(population="prefix_correct")
        dead = pc[pc.n_rounds == 0].groupby("series").depth.min()
        if len(dead):
            deep.append(f"{suite} from depth {int(dead.min())}")
    if deep:
        print("- Generate mode: no chain of any drafter is still correct at " + ", ".join(deep) + "; deeper masses "
              "there are measured on drafts conditioned on wrong tokens (the teacher-forced trace measures every depth "
              "on the true prefix).")


def pooled(root: Path) -> Comparison:
    """Every generate-mode suite pooled per drafter (series = drafter name, not trace:drafter)."""
    return pool_by_drafter(Comparison.of(
        [read_trace(p) for p in sorted(root.glob("smollm2-*.drift")) if not p.name.endswith("-tf.drift")]
    ))


def window(root: Path) -> None:
    """Acceptance inside vs beyond the trained window, per generate-mode suite and drafter: paired over the groups
    (source documents) with rounds on both sides (long code cuts each file once inside and once beyond); groups on
    one side only are counted, not compared (they differ by document as well as by position)."""
    from drifttool.analysis.stats import paired, verdict

    print(f"\nAcceptance inside vs beyond the {TRAINED_WINDOW}-token trained window (a round is beyond when its "
          "deepest draft position is), per suite, paired over the groups with rounds on both sides:\n")
    print("| suite | drafter | groups both sides (one side only) | acc. length inside / beyond (pooled over them) | "
          "beyond − inside, mean over groups [95% CI] | p | MDE | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    unpaired = []
    for suite, mode, p in _traces(root):
        if mode != "generate":
            continue
        cmp = Comparison.of([read_trace(p)])
        # compare's rule (analysis/decay.py): a round is beyond when its deepest draft query sits at >= the window
        r = cmp.rounds.assign(beyond=cmp.rounds["context_len"] - 2 + cmp.rounds["depth"] >= TRAINED_WINDOW)
        for s, g in r.groupby("series", observed=True):
            agg = g.groupby(["group", "beyond"], observed=True)["accepted"].agg(["sum", "count"])
            al = (1 + agg["sum"] / agg["count"]).unstack("beyond")
            both = al.dropna() if {False, True} <= set(al.columns) else al.iloc[:0]
            one = len(al) - len(both)
            if both.empty:
                sides = {k: int(al[k].notna().sum()) if k in al.columns else 0 for k in (False, True)}
                unpaired.append(f"{suite} ({sides[False]} inside, {sides[True]} beyond)")
                break  # the same documents for every drafter of the trace
            tot = agg.loc[agg.index.get_level_values("group").isin(both.index)].groupby(level="beyond").sum()
            pooled_al = (1 + tot["sum"] / tot["count"]) if len(both) else pd.Series(dtype=float)
            st = paired((both[True] - both[False]).to_numpy()) if len(both) else paired(np.array([]))
            v = verdict(st["mean"], st["p"], st["mde"], float(pooled_al.get(False, np.nan)) - 1.0)
            ins, bey = (f"{pooled_al[k]:.2f}" if k in pooled_al.index else "–" for k in (False, True))
            print(f"| {suite} | {s} | {len(both)} ({one}) | {ins} / {bey} | "
                  f"{fmt_ci(st['mean'], st['lo'], st['hi'])} | {fmt_p(st['p'])} | {fmt_mde(st['mde'], 2)} | "
                  f"{v.replace('rise', 'higher beyond').replace('fall', 'lower beyond')} |")
    if unpaired:
        print(f"\n{'; '.join(unpaired)} groups: every source document of these suites lies on one side of the window "
              "only, so they give no paired comparison (their inside and beyond rounds differ by document as well).")


def where(cmp: Comparison) -> None:
    from drifttool.analysis.where_attention import attention_targets

    print("\nWhere the heads look (pooled over the generate-mode suites per drafter; descriptive):")
    w = attention_targets(by_drafter(cmp.heads()), cmp.rounds)
    if w.empty:
        return
    print("\n| drafter | depth | pos0 | early | recent | self | other | mean max weight |")
    print("|---|---|---|---|---|---|---|---|")
    for _, r in w[w.depth.isin([1, 2, cmp.depth])].iterrows():
        print(
            f"| {r.series} | {int(r.depth)} | {r.pos0:.2f} | {r.early:.2f} | {r.recent:.2f} | {r.self:.2f} | "
            f"{r.other:.2f} | {r.max_prob:.2f} |"
        )


def predictors(cmp: Comparison) -> None:
    pr = cmp.predictors()
    if pr.empty:
        return
    rho = pr[pr.depth >= 2].groupby(["series", "metric", "depth"]).spearman.first().reset_index()
    t = rho.groupby(["series", "metric"]).spearman.agg(["mean", "min", "max"]).reset_index()
    print("\nWhat tracks rejection (pooled over the generate-mode suites per drafter; descriptive):")
    print("\n| drafter | metric | mean rank corr. with acceptance (depths ≥ 2; rounds pooled, descriptive) | range |")
    print("|---|---|---|---|")
    for _, r in t.iterrows():
        print(f"| {r.series} | {r.metric} | {r['mean']:+.2f} | {r['min']:+.2f} … {r['max']:+.2f} |")


def budget() -> None:
    """The shipped drafters' training budget and held-out quality, from their report.json."""
    from drifttool.zoo import MODELS_DIR

    reps = {v: json.loads((MODELS_DIR / "smollm2" / v / "report.json").read_text()) for v in ("eagle3", "eagle3.1")}
    r = reps["eagle3"]
    acc = " / ".join(f"{reps[v]['heldout_top1_per_step'][0]:.2f} ({v})" for v in reps)
    window = TRAINED_WINDOW  # the drafter config's trained_window
    runs = r.get("earlier_runs", [])  # runs before this one, each warm-starting the next: totals over all
    tot = {k: r[k] + sum(w[k] for w in runs) for k in ("cache_tokens", "cache_conversations", "train_tokens_seen",
                                                       "steps", "train_seconds")}
    how = (f" ({len(runs) + 1} runs, each after the first warm-started from the drafters shipped before it on "
           f"conversations no earlier run saw: " + ", then ".join(
               f"{w['steps']} steps on {w['cache_tokens']:,} tokens" for w in [*runs, r]) + ")" if runs else "")
    print(f"Shipped drafters (their report.json): {tot['cache_tokens']:,} cached training tokens in "
          f"{tot['cache_conversations']:,} conversations, {tot['train_tokens_seen']:,} seen per variant in "
          f"{tot['steps']} steps{how} ({tot['train_seconds'] / 60:.0f} min of training on 2 shared CPU cores), "
          f"trained window {window}; held-out teacher-forced depth-1 agreement with the target {acc} over "
          f"{r['heldout_positions']:,} positions" + (" (" + " / ".join(
              f"{reps[v]['earlier_runs'][-1]['eval']['heldout_top1_per_step'][0]:.2f}" for v in reps)
              + " before the last run)." if runs else "."))
    print()


def sink_words(cap: dict) -> str:
    """A trace's sink rule in words, from its manifest (the resolved positions, and whether the target chose them)."""
    s = cap.get("sink") or {}
    pos = sorted(set(range(int(s.get("first_n", 0)))) | set(s.get("positions", [])))
    where = f"position{'s' if len(pos) != 1 else ''} {', '.join(map(str, pos))}" if pos else "no position"
    if s.get("token_ids"):
        where += f" and token ids {s['token_ids']}"
    rule = str(cap.get("sink_rule") or "")
    return f"the target's own sink ({where})" if rule.endswith("target") else f"the sink {where}"


def settings(root: Path) -> None:
    """What the sample traces were captured with, read from their manifests and prompts tables."""
    caps, gen, sinks = [], [], {}
    for suite, mode, p in _traces(root):
        t = read_trace(p)
        caps.append(t.manifest["capture"])
        sinks.setdefault(sink_words(t.manifest["capture"]), []).append(f"{suite} ({mode})")
        gen += t.prompts["n_generated"].astype(int).tolist()
    c = caps[0]
    depth = sorted({int(x["depth"]) for x in caps})
    sink = "; ".join(f"{w}: {', '.join(s)}" for w, s in sinks.items())
    print(f"Captured with: depth {', '.join(map(str, depth))}, seed {c.get('seed')}, temperature {c.get('temperature')}"
          f" (greedy); sink: {sink}; new tokens generated per prompt {min(gen)}–{max(gen)} "
          f"(median {int(np.median(gen))}).")
    print()


def _block(text: str, name: str, fn, root: Path) -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        fn(root)
    begin, end = f"<!-- {name}:begin (scripts/real_results.py --readme) -->", f"<!-- {name}:end -->"
    a, b = text.index(begin) + len(begin), text.index(end)
    return text[:a] + "\n" + buf.getvalue().strip() + "\n" + text[b:]


DOCS = {"results": "docs/results.md", "trees": "docs/draft_trees.md", "answer": ("README.md", "docs/index.md"),
        "sink": "docs/real_target.md"}


SINK = Path("sink_seeds")
OLD_RECIPE = SINK / "old_recipe"


def _sink_rows(what: str, p: Path) -> None:
    """One row per drafter of a sink-experiment trace (sink_experiment's table)."""
    from drifttool.analysis.answer import has_sink
    from drifttool.styles import drafter_kind

    s = Comparison.of([read_trace(p)]).summary()
    for r in s.itertuples():
        kept = "- (no sink)" if r.sink_retention != r.sink_retention or not has_sink(r) else \
            f"{fmt_ratio(r.sink_retention, r.sink_retention_lo, r.sink_retention_hi)}, " \
            f"p {fmt_p(r.sink_retention_p)}"
        rm = "not recorded" if r.recency_ratio != r.recency_ratio else \
            f"{fmt_ratio(r.recency_ratio, r.recency_ratio_lo, r.recency_ratio_hi)}, p {fmt_p(r.recency_ratio_p)}"
        peak = "-" if r.recency_ratio_max != r.recency_ratio_max else \
            f"{fmt_ratio(r.recency_ratio_max, r.recency_ratio_max_lo, r.recency_ratio_max_hi)} at depth " \
            f"{int(r.recency_ratio_max_depth)}, p {fmt_p(r.recency_ratio_max_p_holm)}"
        verdict = r.drift_verdict + (f" at depth{'' if r.drift_depths.isdigit() else 's'} {r.drift_depths}"
                                     if r.drift_verdict == "drift" else "")
        print(f"| {what} | {drafter_kind(r.series)} | {fmt_ci(r.sink_lift_d1, r.sink_lift_d1_lo, r.sink_lift_d1_hi, 1)} "
              f"| {kept} | {rm} | {peak} | {verdict} | {fmt_ci(r.mean_acceptance_length, r.al_lo, r.al_hi)} | "
              f"{r.groups} |")


def init_check(p: Path) -> list[str]:
    """Per variant of an init trace: its depth-2 sink mass over its depth-1 (same rounds, pooled), the recipe's test
    that both variants feed back a state the copied layer knows."""
    from drifttool.analysis.verdict import paired_sums
    from drifttool.styles import drafter_kind

    cmp = Comparison.of([read_trace(p)])
    out = []
    for sr in cmp.series:
        g = paired_sums(cmp.depths[cmp.depths.series == sr.label], ("sink_mass", 2), ("sink_mass", 1))
        out.append(f"{drafter_kind(sr.label)} x{g['num'].sum() / g['den'].sum():.2f}")
    return out


def sink_experiment(root: Path) -> None:
    """The sink-inheritance experiment (docs/real_target.md): per variant, on the held-out long-code cuts, the depth-1
    sink lift, sink retention to depth K, the recency-matched ratio at K and at the curve's peak, the verdict and
    acceptance — the norm-at-1 recipe at initialisation and for every trained seed, the old recipe (the target's
    final-norm weights in the output norm) kept as the negative example, the scratch recipe's seed 0 for contrast;
    then the panel's statistics over seeds in words."""
    new_init = root / SINK / "init" / "smollm2-long_code-init.drift"
    seeds = sorted((root / SINK).glob("smollm2-long_code-s*.drift"), key=lambda q: int(q.name.split("-s")[-1][:-6]))
    runs = ([("norm-at-1 recipe, at initialisation", new_init)] if new_init.is_dir() else []) + \
        [(f"norm-at-1 recipe, seed {q.name.split('-s')[-1][:-6]}", q) for q in seeds] + \
        [(f"old recipe (negative example), {w}", root / OLD_RECIPE / f) for w, f in (
            ("at initialisation", "smollm2-long_code-init.drift"), ("seed 0", "smollm2-long_code-s0.drift"),
            ("seed 1", "smollm2-long_code-s1.drift"))] + \
        [("scratch recipe, seed 0 (for contrast)", root / "seeds" / "smollm2-long_code-s0.drift")]
    runs = [(w, p) for w, p in runs if p.is_dir()]
    if not runs:
        print("(no sink-initialised traces yet: `bash scripts/train_sink_panel.sh && bash scripts/capture_sink_panel.sh`)")
        return
    print("| drafters | variant | depth-1 sink lift [95% CI] | sink kept at depth 8 [CI], p | own/recent at depth 8 "
          "[CI], p | own/recent, curve's peak [CI], Holm p | verdict | acceptance length [CI] | groups |")
    print("|---|---|---|---|---|---|---|---|---|")
    for what, p in runs:
        _sink_rows(what, p)
    print()
    for label, p in (("norm-at-1 recipe", new_init), ("old recipe", root / OLD_RECIPE / "smollm2-long_code-init.drift")):
        if p.is_dir():
            print(f"- Depth-2 sink mass over depth-1 at initialisation, {label} (same rounds, pooled): "
                  + ", ".join(init_check(p)) + ".")
    print("- " + sink_panel_sentence(seeds))


def sink_panel_sentence(paths: list[Path]) -> str:
    """The sink panel in words, from its statistics over seeds (analysis.seeds: per seed the mean over groups of
    each variant's log sink retention, then the sign-flip test over seeds), whatever it finds."""
    import math

    from drifttool.analysis.seeds import MIN_SEEDS, differences, over_seeds, per_group
    from drifttool.analysis.stats import paired

    if not paths:
        return ("No seed of the norm-at-1 recipe has finished training yet: `bash scripts/train_sink_panel.sh` "
                "(resumable), then `bash scripts/capture_sink_panel.sh`.")
    rows = per_group(Comparison.of([read_trace(p) for p in paths]))
    per_seed = rows.groupby(["variant", "seed"])["sink_retention"].mean()
    parts = []
    for v, name in (("eagle3", "EAGLE-3"), ("eagle3.1", "EAGLE-3.1")):
        if v not in per_seed.index.get_level_values(0):
            continue
        st = paired(per_seed.loc[v].to_numpy(float))
        ci = f" [{math.exp(st['lo']):.2f}, {math.exp(st['hi']):.2f}]" if st["n"] > 1 else ""
        parts.append(f"{name} keeps x{math.exp(st['mean']):.2f}{ci} of its depth-1 sink mass by depth 8 "
                     f"(sign-flip over seeds p {fmt_p(st['p'])})")
    t = over_seeds(differences(rows)).set_index("quantity")
    d = t.loc["sink_retention"] if "sink_retention" in t.index else None
    n = len(paths)
    head = f"Across {n} seed{'s' * (n > 1)} of the norm-at-1 recipe (t-intervals over seed means): " + "; ".join(parts)
    if d is None or d.seeds < 1:
        return head + "."
    diff = (f"EAGLE-3.1 / EAGLE-3 retention x{math.exp(d.estimate):.2f}"
            + (f" [{math.exp(d.lo):.2f}, {math.exp(d.hi):.2f}]" if d.seeds > 1 else "")
            + f", {int(d.seeds_agreeing)}/{int(d.seeds)} seeds agreeing, sign-flip p {fmt_p(d.p)}")
    if d.seeds < MIN_SEEDS:
        return (f"{head}; {diff}: no architecture verdict — a sign-flip test over {int(d.seeds)} seeds cannot reach "
                f"p < 0.05 (at least {MIN_SEEDS} seeds).")
    word = "differ" if d.p < 0.05 else "do not differ detectably"
    mde = f" (it detects x{math.exp(d.mde):.2f} at 80% power)" if np.isfinite(d.mde) else ""
    return f"{head}; {diff}: the variants {word} in sink retention over seeds{mde}."


PATCH = Path("patch")
PATCH_WORDS = {"feedback-norm@2-K": "feeding back the normalised state", "feedback-rms1@2-K":
               "scaling the fed-back state to its depth-1 RMS", "feedback-teacher@2-K":
               "feeding back the teacher-forced state instead", "attention-recency@2-K":
               "removing drift (the own drafted slots' attention matched to recency)", "attention-own@2-K":
               "removing the own drafted slots from attention", "attention-sink@2-K": "removing the sink",
               "attention-sinkhold@2-K": "holding the sink at its depth-1 share"}


def _patch_clause(e: dict) -> str:
    """One intervention's acceptance change in a few words (analysis.patching.effects), with its test."""
    a = e["acceptance_length"]
    what = PATCH_WORDS.get(e["intervention"]["label"], e["intervention"]["label"])
    if a.get("sd") == 0 and a["difference"] == 0:
        return f"{what} changes no round's acceptance"
    d = f"{a['difference']:+.3f} [{a['difference_lo']:+.3f}, {a['difference_hi']:+.3f}] ({fmt_p(a['p'], 'words')})"
    if a["p"] < 0.05:
        return f"{what} {'raises' if a['difference'] > 0 else 'lowers'} acceptance length: {d} per group"
    return f"{what}: {d} per group, no change its groups detect (MDE {a['mde']:.3f})"


def patch_landing(root: Path) -> None:
    """The README's line on what the fed-back state costs in acceptance: per shipped patch trace and drafter, each
    intervention's paired acceptance-length change (generated; docs/patching.md)."""
    from drifttool.analysis.patching import effects

    for p in sorted((root / PATCH).glob("*.drift")):
        t = read_trace(p)
        es = effects(t)
        by: dict[str, list] = {}
        for e in es:
            by.setdefault(e["clean"], []).append(e)
        suite = Path(t.manifest["capture"]["probes"]["path"]).stem
        if es and all(e["intervention"]["site"] == "prompt" for e in es):
            _scan_landing(t, es, suite)
            continue
        n = es[0]["acceptance_length"].get("n_groups", 0) if es else 0
        parts = [f"on {name}: " + "; ".join(_patch_clause(e) for e in v) for name, v in by.items()]
        what = "drift" if all(e["intervention"]["site"] == "attention" for e in es) else "the fed-back state"
        print(f"- **What {what} costs in acceptance** ({suite}, `drifttool patch`: the same rounds with "
              f"and without an intervention, paired per group over {n} groups; these checkpoints): "
              + "; ".join(parts) + ".")


def _scan_landing(t, es: list[dict], suite: str) -> None:
    """The README's line for a prompt-span scan: per drafter, how many spans move acceptance after Holm and the
    largest change (analysis.patching.scan)."""
    from drifttool.analysis.patching import mde_clause, scan

    table = scan(t, es)
    parts = []
    for name, g in table[table["n_groups"] > 0].groupby("clean", sort=False):
        top = g.iloc[0]
        hit = g[g["p_holm"] < 0.05]
        parts.append(f"on {name}, {len(hit)} of {len(g)} spans move acceptance length after Holm"
                     + (f" ({', '.join(hit['span'])})" if len(hit) else mde_clause(g))
                     + f"; the largest change: deleting {top['words'].split(' deleted from')[0]}, "
                       f"{top['difference']:+.3f} [{top['lo']:+.3f}, {top['hi']:+.3f}] per group "
                       f"({fmt_p(top['p_holm'], 'words')} after Holm)")
    n = int(table["n_groups"].max()) if len(table) else 0
    print(f"- **Which prompt tokens the drafters' acceptance depends on** ({suite}, `drifttool patch --scan`: each "
          f"template token, turn, system sentence and window from the end deleted from the drafter's context only, "
          f"paired round by round over {n} groups; these checkpoints): " + "; ".join(parts) + ".")


def patch_results(root: Path) -> None:
    """docs/results.md: every shipped patch trace's answer in full (analysis.patching.answer)."""
    from drifttool.analysis.patching import answer

    for p in sorted((root / PATCH).glob("*.drift")):
        print(f"\n**Interventions** (`{p.relative_to(root.parent) if root.parent != Path('.') else p}`, "
              "`drifttool patch`, docs/patching.md; acceptance length paired round by round and tested over "
              "groups, each quantity against the clean pass):\n")
        for line in answer(read_trace(p)):
            print(f"- {line}")


def landing(root: Path) -> None:
    """The README's answer: per shipped suite (drifttool.demo.SHIPPED: long_code, mt_chat), one plain sentence per
    half of the published story (what `drifttool demo` prints first), then the sentences `compare` opens with
    (EAGLE-3 and EAGLE-3.1 only)."""
    from drifttool.analysis.answer import answer, plain_halves
    from drifttool.demo import shipped_traces

    for suite, what, p in shipped_traces(root):
        cmp = Comparison.of([read_trace(p)])
        halves = plain_halves(cmp)
        if halves:
            print(f"- **{suite}** ({what}), in plain words (these two checkpoints, one per variant): {' '.join(halves)}")
        for line in answer(cmp):
            if "norm_output" not in line.split("?")[0]:
                print(f"- **{suite}**: {line}")
    patch_landing(root)


def readme(root: Path, repo: Path) -> None:
    """Replace the generated blocks (results and trees in docs/, the answer in the README) between their markers
    with this script's output."""
    fns = {"results": lambda r: main(str(r)), "trees": trees, "answer": landing, "sink": sink_experiment}
    for name, rels in DOCS.items():
        for rel in [rels] if isinstance(rels, str) else rels:
            out = repo / rel
            out.write_text(_block(out.read_text(), name, fns[name], root))


def series(root: Path) -> None:
    """Drift across training: the checkpoint-series trace per variant and step (descriptive: 3 CI prompts)."""
    from drifttool.analysis.training import training_table

    p = root / "training" / SERIES
    if not p.is_dir():
        return
    cmp = Comparison.of([read_trace(p)])
    k = cmp.depth
    t = training_table(cmp.training(), k)
    steps = sorted({int(x) for x in t.step})
    print(f"\nAcross training (`{p.relative_to(root.parent) if root.parent != Path('.') else p}`: the sink-initialised "
          f"panel's seed 0 (`scripts/train_sink_panel.sh`) at steps {', '.join(map(str, steps))} of its training so far, "
          f"on the CI prompts: {int(t.groups.max())} groups, descriptive):")
    print(f"\n| drafter | step | mean acc. length | acc. rate d1 | sink mass d1 | self mass d{k} | rms_in d{k} |")
    print("|---|---|---|---|---|---|---|")
    for r in t.itertuples(index=False):
        print(f"| {r.variant} | {r.step} | {r.mean_acceptance_length:.2f} | {r.acceptance_d1:.3f} | {r.sink_d1:.3f} | "
              f"{getattr(r, f'self_d{k}'):.3f} | {getattr(r, f'rms_in_d{k}'):.2f} |")


# the sink panel's seed 0 (scripts/train_sink_panel.sh) as it trains: its saved checkpoints on the CI prompts
SERIES = "smollm2-sink-s0-series.drift"
TREE = Path("trees") / "smollm2-quick-tree.drift"
CHAIN5 = Path("trees") / "chain" / "smollm2-quick-chain5.drift"


def trees(root: Path) -> None:
    """Chain vs tree on the same prompts and depth (the Draft trees page's bundled trace): acceptance length per
    drafter from each trace's rounds (bootstrap over groups), and the tree's per-node drift at depths 1 and 2."""
    from drifttool.analysis.metrics import bootstrap_ratio

    tp, cp = root / TREE, root / CHAIN5
    if not (tp.is_dir() and cp.is_dir()):
        return
    tree, chain = read_trace(tp), read_trace(cp)
    cap = tree.manifest["capture"]
    chain_al = Comparison.of([chain]).summary().set_index("series")
    nodes = tree.tree_nodes
    r = tree.rounds
    groups = r["prompt_id"].astype(str).map(tree.groups)
    r = r.assign(group=groups.where(groups.notna(), r["prompt_id"].astype(str)))
    n_groups = r["group"].nunique()
    from drifttool.analysis.compare import suite_name

    spec = cap["tree"]
    spec = (f"{spec['kind']}:" + ",".join(f"{k}={v}" for k, v in spec.items() if k != "kind")
            if isinstance(spec, dict) else str(spec))
    print(f"\nChain (`--depth {chain.manifest['capture']['depth']}`) against tree (`--tree \"{spec}\"`) on "
          f"`{suite_name(tree)}.jsonl`: {r['prompt_id'].nunique()} prompts, "
          f"{n_groups} groups, greedy, seed {cap.get('seed')}, {cap.get('max_new_tokens')} new tokens; mean "
          "acceptance length over rounds (95% CI over groups where >= 6).")
    print("\n| drafter | chain | tree | sink mass d1 → d2 (tree) | self mass d2: main / side | rms_in d1 → d2 (tree) |")
    print("|---|---|---|---|---|---|")
    gains = []
    for d in series_order_of(nodes["drafter"].astype(str).unique()):
        rr = r[r["drafter"].astype(str) == d]
        g = rr.groupby("group", observed=True)["accepted"].agg(["sum", "count"])
        al, lo, hi = bootstrap_ratio(g["sum"].to_numpy(), g["count"].to_numpy())
        c = chain_al.loc[d]
        nd = nodes[nodes["drafter"].astype(str) == d]
        by = nd.groupby("depth")
        sink = by["sink_mass"].mean()
        rms = by["rms_in"].mean() if "rms_in" in nd else None
        d2 = nd[nd.depth == 2]
        main_self, side_self = d2[d2.main_path]["self_mass"].mean(), d2[~d2.main_path]["self_mass"].mean()
        rms_txt = f"{rms.get(1, float('nan')):.2f} → {rms.get(2, float('nan')):.2f}" if rms is not None else "-"
        gains.append(f"{d} {1 + al - c.mean_acceptance_length:+.2f}")
        print(f"| {d} | {fmt_ci(c.mean_acceptance_length, c.al_lo, c.al_hi)} | "
              f"{fmt_ci(1 + al, 1 + lo if n_groups >= 6 else float('nan'), 1 + hi)} | "
              f"{sink.get(1, float('nan')):.3f} → {sink.get(2, float('nan')):.3f} | {main_self:.3f} / {side_self:.3f} | "
              f"{rms_txt} |")
    print(f"\nTree minus chain, tokens per round: {', '.join(gains)}. " + tree_power(n_groups))


def tree_power(n_groups: int) -> str:
    """What a paired test over the tree's groups could say: below 6 groups nothing (smallest p 2/2^n >= 0.0625);
    from 6 on a test could reach p < 0.05, but none was run on these descriptive rows."""
    smallest = 2 / 2 ** n_groups
    if smallest >= 0.05:
        return (f"Descriptive only: with {n_groups} groups no paired test can reach p < 0.05 (the sign-flip test's "
                f"smallest p is 2/2^{n_groups} = {smallest:.3g}).")
    return (f"Descriptive only: no paired test was run on these {n_groups} groups (the sign-flip test's smallest p "
            f"would be 2/2^{n_groups} = {smallest:.3g}).")


def series_order_of(names) -> list[str]:
    from drifttool.plots.base import series_order

    return series_order([str(n) for n in names])


def answers(root: Path) -> None:
    """The answer in words per generate-mode suite (analysis.answer: what `compare` opens with)."""
    from drifttool.analysis.answer import answer

    print("\n**The answer, per suite** (generated by `drifttool compare`'s first lines; lift = attention mass / the "
          "share uniform attention over the keys seen would give it):\n")
    chat = root / "chat" / "smollm2-mt_chat.drift"
    runs = [(s, p) for s, m, p in _traces(root) if m == "generate"]
    if chat.is_dir() and chat not in [p for _, p in runs]:  # _traces already lists chat/: each suite once
        runs.append(("mt_chat", chat))
    for suite, p in runs:
        for line in answer(Comparison.of([read_trace(p)])):
            print(f"- {suite}: {line}")
    print()


# arXiv 2605.09992 Table 2 (Llama 3.1 8B + SpecForge EAGLE-3 head, MT-Bench, 80 prompts), read from a secondary
# summary: approximate. Depth 1 -> 8: pre-norm (EAGLE-3) and post-norm (EAGLE-3.1) feedback.
PUBLISHED = {"eagle3": {"rms_in": (3.92, 14.02), "sink_mass": (0.46, 0.08), "recent_all_mass": (0.14, 0.31),
                        "entropy": (2.04, 2.73)},
             "eagle3.1": {"rms_in": (1.21, 1.20), "sink_mass": (0.11, 0.10), "recent_all_mass": (0.50, 0.53)}}


def table2(root: Path) -> None:
    """The paper's Table 2 in its own form, depth 1 -> 8: on its MT-Bench-like short chat (the shipped drafters, the
    target's own sink) and on long code (the seed panel, pooled over seeds), beside the published rows."""
    chat = root / "chat" / "smollm2-mt_chat.drift"
    if chat.is_dir():
        n = read_trace(chat).prompts["prompt_id"].nunique()
        table2_of([chat], f"the shipped drafters, {n} single-turn chat questions written for this project (MT-Bench's "
                          "kind: writing, roleplay, reasoning, math, coding, extraction, STEM, humanities), "
                          + sink_words(read_trace(chat).manifest["capture"]))
    seeds = sorted((root / "seeds").glob("smollm2-long_code-s*.drift"))
    if seeds:
        table2_of(seeds, f"the seed panel's drafters, long code, pooled over {len(seeds)} seeds, "
                         + sink_words(read_trace(seeds[0]).manifest["capture"]))


def table2_of(paths: list[Path], what: str) -> None:
    from drifttool.styles import drafter_kind

    cmp = Comparison.of([read_trace(p) for p in paths])
    d = cmp.depths.assign(variant=cmp.depths["series"].map(drafter_kind))
    d = d[d.variant.isin(["eagle3", "eagle3.1"])]
    k = cmp.depth
    cols = [("rms_in", "hidden RMS (fed back)", 2), ("sink_mass", "sink mass", 4), ("sink_lift", "sink lift", 2),
            ("recent_all_mass", "recent mass (the last 32 keys, own drafts included: the paper's)", 3),
            ("recent_mass", "recent mass (the last 32 prompt slots only)", 3), ("recent_lift", "recent lift", 2),
            ("template_mass", "template mass (chat delimiters)", 3), ("template_lift", "template lift", 2),
            ("entropy", "entropy", 2), ("entropy_norm", "entropy / log(keys)", 3)]
    print(f"\n**The paper's Table 2, in its form** (depth 1 → {k}; this project: SmolLM2-135M + {what}; "
          f"{d['group'].nunique()} groups, 95% CI over groups; published: Llama 3.1 8B + SpecForge EAGLE-3 head, "
          "MT-Bench, read from a secondary summary — approximate):\n")
    print("| quantity | drafter | depth 1 | depth " + str(k) + " | published depth 1 → 8 |")
    print("|---|---|---|---|---|")
    from drifttool.analysis.metrics import cluster_mean

    for m, name, dg in cols:
        for v in ("eagle3", "eagle3.1"):
            sub = d[d.variant == v]
            cm = cluster_mean(sub[sub.depth.isin([1, k])], m, ["depth"]).set_index("depth")
            cell = lambda i, cm=cm, m=m, dg=dg: (fmt_ci(cm.loc[i, m], cm.loc[i, f"{m}_lo"], cm.loc[i, f"{m}_hi"], dg)  # noqa: E731
                                                 if i in cm.index and cm.loc[i, m] == cm.loc[i, m] else "-")
            pub = PUBLISHED.get(v, {}).get(m)
            print(f"| {name} | {v} | {cell(1)} | {cell(k)} | {f'{pub[0]:.2f} → {pub[1]:.2f}' if pub else '-'} |")


def template_perturbation(root: Path) -> None:
    """The template perturbation (analysis.perturbation) beside the paper's four rows."""
    from drifttool.analysis import perturbation as pt

    p = root / "chat" / "smollm2-mt_chat_template.drift"
    if not p.is_dir():
        return
    cmp = Comparison.of([read_trace(p)])
    t = pt.table(cmp)
    print("\n**Template perturbation** (the 24 chat questions, each rendered four ways — `scripts/template_perturbation.py`;"
          " SmolLM2's bos token is `<|im_start|>`, which also opens its template; shipped drafters, greedy, depth 8; "
          "acceptance length with a 95% CI over questions, and each rendering against `template+bos` paired per "
          "question; published: pre-norm EAGLE-3 / post-norm EAGLE-3.1 on Llama 3.1 8B, approximate):\n")
    print("| drafter | rendering | acceptance length [95% CI] | vs template+bos [95% CI] | p | questions | published |")
    print("|---|---|---|---|---|---|---|")
    for r in t.itertuples():
        vs = "-" if r.vs_template_bos != r.vs_template_bos else f"{r.vs_template_bos:+.2f} [{r.vs_lo:+.2f}, {r.vs_hi:+.2f}]"
        print(f"| {r.series} | {r.variant} | {fmt_ci(r.acceptance_length, r.al_lo, r.al_hi)} | {vs} | "
              f"{fmt_p(r.p)} | {r.groups} | {r.published:.2f} |")
    b = pt.between(cmp, "eagle3", "eagle3.1")
    if len(b):
        print("\nEAGLE-3.1 − EAGLE-3 per rendering, paired per question (these two checkpoints): " + "; ".join(
            f"{r.variant} {r.difference:+.2f} [{r.lo:+.2f}, {r.hi:+.2f}] (p {fmt_p(r.p)}, MDE {fmt_mde(r.mde, 2)}, "
            f"{r.groups} questions)"
            for r in b.itertuples()) + ".")


PANELS = {"seeds": ("trained from scratch", "`scripts/train_seed_panel.sh`, `scripts/capture_seed_panel.sh`"),
          "sink_seeds": ("whose decoder layer starts as SmolLM2's layer 15 (a sink layer; docs/real_target.md)",
                         "`scripts/train_sink_panel.sh`, `scripts/capture_sink_panel.sh`")}


def seed_panel(root: Path) -> None:
    """The seed panels (scratch and sink-initialised): EAGLE-3.1 - EAGLE-3 per seed and over seeds (analysis.seeds:
    a t-interval over seed means and the sign-flip test over seeds, the test the groups are read by), the
    architecture claim kept apart from the shipped checkpoints' one."""
    from drifttool.analysis.seeds import QUANTITIES, differences, fmt, over_seeds, per_group, sentence

    for folder, (recipe, scripts) in PANELS.items():
        paths = sorted((root / folder).glob("smollm2-long_code-s*.drift"))
        if not paths:
            continue
        cmp = Comparison.of([read_trace(p) for p in paths])
        rows = per_group(cmp)
        t = over_seeds(differences(rows))
        print(f"\n**Seed panel, {recipe}** ({len(paths)} seeds, each an EAGLE-3 and an EAGLE-3.1 drafter trained on "
              "the same cached features and batches, a seed changing the batch order and scored slots (and, from "
              "scratch, the initial weights); long-code suite, first cut of 24 held-out stdlib modules, greedy, depth "
              f"8; {scripts}). EAGLE-3.1 − EAGLE-3 per seed (mean over groups; ratios as factors) and over seeds "
              "(t-interval over seed means; p from the exact sign-flip test over the seed means, the test every "
              "group-level claim uses, with its detectable effect at 80% power; the plain sign test's p beside it "
              "for reference):\n")
        print("| quantity | per seed | over seeds [95% t-interval] | seeds agreeing | sign-flip p | detectable at 80% "
              "power | sign test p | groups |")
        print("|---|---|---|---|---|---|---|---|")
        for r in t.itertuples():
            per = ", ".join(fmt(r, x) if x == x else "-" for x in r.per_seed)
            ci = "-" if r.lo != r.lo else f"{fmt(r, r.estimate)} [{fmt(r, r.lo)}, {fmt(r, r.hi)}]"
            mde = f"none with {r.seeds} seeds" if not np.isfinite(r.mde) else (f"x{math.exp(-r.mde):.3f} / x{math.exp(r.mde):.3f}" if r.ratio
                                                      else f"±{r.mde:.3f}")
            print(f"| {QUANTITIES[r.quantity]} | {per} | {ci} | {r.seeds_agreeing}/{r.seeds} | {r.p:.3g} | "
                  f"{mde} | {r.sign_p:.3g} | {r.groups} |")
        al = rows.groupby(["seed", "variant"])["acceptance_length"].mean().unstack()
        print("\nMean acceptance length per seed (mean over groups): " + "; ".join(
            f"seed {int(s)}: EAGLE-3 {r['eagle3']:.3f}, EAGLE-3.1 {r['eagle3.1']:.3f}" for s, r in al.iterrows()) + ".")
        print("\n- " + sentence(t) + " The shipped drafters' comparison above is about those two checkpoints.")


def main(root: str = "sample_traces") -> None:
    pd.set_option("display.width", 200)
    np.seterr(all="ignore")
    answers(Path(root))
    budget()
    settings(Path(root))
    per_suite(Path(root))
    detected, tests = trends(Path(root))
    between(Path(root))
    sentences(Path(root), detected, tests)
    seed_panel(Path(root))
    patch_results(Path(root))
    table2(Path(root))
    template_perturbation(Path(root))
    series(Path(root))
    cmp = pooled(Path(root))
    window(Path(root))
    where(cmp)
    predictors(cmp)


if __name__ == "__main__":
    if "--readme" in sys.argv:
        args = [a for a in sys.argv[1:] if a != "--readme"]
        readme(Path(args[0] if args else "sample_traces"), Path(__file__).resolve().parents[1])
    else:
        main(*sys.argv[1:])
        trees(Path(sys.argv[1] if len(sys.argv) > 1 else "sample_traces"))
