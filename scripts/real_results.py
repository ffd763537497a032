"""Print the README's real-target results (markdown) from sample_traces/smollm2-*.drift.

Tables: per suite x drafter (acceptance with 95% CIs over prompts, sink / self mass and feature RMS by depth);
acceptance inside vs beyond the drafters' 2048-token trained window; where heads look hardest at depth 1 and 8;
which measured quantity tracks rejections (mean rank correlation over depths >= 2)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from drifttool.analysis.compare import Comparison
from drifttool.analysis.metrics import bootstrap_ratio
from drifttool.trace import read_trace


def trained_window() -> int:
    """The shipped drafters' stated trained window (their config's trained_window)."""
    from drifttool.model.config import trained_window as tw
    from drifttool.zoo import MODELS_DIR

    cfg = json.loads((MODELS_DIR / "smollm2" / "eagle3" / "config.json").read_text())
    return int(tw(cfg)["window"])


TRAINED_WINDOW = trained_window()


def per_suite(root: Path) -> None:
    print(
        "| suite | mode | drafter | prompts | mean acc. length [95% CI] | acc. rate d1 | sink mass d1 → d8 |"
        " self mass d2 → d8 | rms_in d1 → d8 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for p in sorted([*root.glob("smollm2-*.drift"), *root.glob("teacher_forced/smollm2-*.drift")]):
        suite = p.name.removesuffix(".drift").removeprefix("smollm2-")
        mode = "teacher-forced" if suite.endswith("-tf") else "generate"
        cmp = Comparison.of([read_trace(p)])
        s = cmp.summary().set_index("series")
        d = cmp.per_depth().set_index(["series", "depth"])
        k = cmp.depth
        for n in s.index:
            r = s.loc[n]
            v = lambda m, i, n=n, d=d: d.loc[(n, i), m]  # noqa: E731
            print(
                f"| {suite.removesuffix('-tf')} | {mode} | {n} | {int(r.prompts)} | {r.mean_acceptance_length:.2f} "
                f"[{r.al_lo:.2f}, {r.al_hi:.2f}] | {v('acceptance_rate', 1):.3f} | {v('sink_mass', 1):.3f} → "
                f"{v('sink_mass', k):.3f} | {v('self_mass', 2):.2f} → {v('self_mass', k):.2f} | "
                f"{v('rms_in', 1):.2f} → {v('rms_in', k):.2f} |"
            )


def pooled(root: Path) -> Comparison:
    """Every generate-mode suite pooled per drafter (series = drafter name, not trace:drafter)."""
    cmp = Comparison.of(
        [read_trace(p) for p in sorted(root.glob("smollm2-*.drift")) if not p.name.endswith("-tf.drift")]
    )
    for df in (cmp.rounds, cmp.depths):
        # plain strings: compact traces store these keys as categoricals, which do not concatenate
        df["series"] = df["drafter"].astype(str)
        df["prompt_id"] = df["prompt_id"].astype(str) + "|" + df["series"]  # ids are unique across suites already
    return cmp


def window(cmp: Comparison) -> None:
    # compare's rule (analysis/decay.py): a round is beyond when its deepest draft query sits at >= the window
    r = cmp.rounds.assign(beyond=cmp.rounds["context_len"] - 2 + cmp.rounds["depth"] >= TRAINED_WINDOW)
    print("\n| drafter | deepest draft position | prompts | rounds | mean acc. length [95% CI] |")
    print("|---|---|---|---|---|")
    for (s, b), g in r.groupby(["series", "beyond"]):
        agg = g.groupby("prompt_id")["accepted"].agg(["sum", "count"])
        m, lo, hi = bootstrap_ratio(agg["sum"].to_numpy(), agg["count"].to_numpy())
        label = f"≥ {TRAINED_WINDOW} (beyond)" if b else f"< {TRAINED_WINDOW}"
        print(
            f"| {s} | {label} | {g.prompt_id.nunique()} | {len(g)} | {1 + m:.2f} [{1 + lo:.2f}, {1 + hi:.2f}] |"
        )


def where(cmp: Comparison) -> None:
    from drifttool.analysis.where_attention import attention_targets

    h = cmp.heads()
    d = h["drafter"].astype(str)
    h = h.assign(series=d, prompt_id=h["prompt_id"].astype(str) + "|" + d)
    w = attention_targets(h, cmp.rounds)
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
    print("\n| drafter | metric | mean rank corr. with acceptance (depths ≥ 2) | range |")
    print("|---|---|---|---|")
    for _, r in t.iterrows():
        print(f"| {r.series} | {r.metric} | {r['mean']:+.2f} | {r['min']:+.2f} … {r['max']:+.2f} |")


def main(root: str = "sample_traces") -> None:
    pd.set_option("display.width", 200)
    np.seterr(all="ignore")
    per_suite(Path(root))
    cmp = pooled(Path(root))
    window(cmp)
    where(cmp)
    predictors(cmp)


if __name__ == "__main__":
    main(*sys.argv[1:])
