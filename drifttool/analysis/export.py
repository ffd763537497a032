"""A comparison as one JSON document (`compare --json`): every analysis of analysis/ serialised, with the
definitions a reader needs. Its own module so the data object (compare.Comparison) imports none of the
analyses built on it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import DriftError
from . import stats
from .compare import Comparison
from .decay import any_beyond, context_curve, decay_table, window_split, windows
from .metrics import ACCEPTANCE_DEFINITIONS

DEFINITIONS = {
    "self_lift": "mean self lift over depths 2..K: self mass / (self slots / keys seen); 1.0 = uniform attention",
    "self_lift_trend": "self lift at depth K / at depth 2 over the same rounds (group-bootstrap CI): descriptive only, "
                       "never a verdict (its null is uniform attention; a drafter that favours recent keys has a "
                       "falling self lift without any drift)",
    "drift_verdict": "drift | no drift | not established | uniform, from the recency-matched ratio at depth K "
                     "(drift_why: the reason); see docs/statistics.md",
    "recency_ratio": "RM(K) = sum of self mass at depth K / sum of the same rounds' depth-1 mass on their K-1 most "
                     "recent keys (group-bootstrap CI, 10,000 draws; _p: sign-flip test over groups of log RM_g; "
                     "_mde: the factor the groups detect at 80% power); 1 = attention by distance alone, > 1 = own "
                     "drafts draw more than equally recent prompt tokens did (drift); _uniform: what uniform "
                     "attention gives over the same rounds",
    "sink_retention": "sink mass at depth K / at depth 1 over the same rounds (CI, p as recency_ratio); NaN without "
                      "a depth-1 sink mass",
    "rms_growth": "RMS of the fed-back layer input at depth K / at depth 1 over the same rounds (CI, p as "
                  "recency_ratio); feature_growth is the same quantity pooled over all rounds",
    "contrasts": "per series against the baseline: the paired per-group factor by which RM(K), sink retention and "
                 "RMS growth differ (exp of the mean log difference, t-interval, sign-flip p)",
    "sink_lift_d1": "depth-1 sink mass / (sink slots / keys seen): 1.0 = no more than uniform (no sink to lose)",
    "feature_growth": "RMS of the drafter layer input at depth K / at depth 1",
    "acceptance_rate": "vLLM per-position rate: fraction of chains with depth d accepted",
    "n_rounds": "per depth: the rounds drafting the depth (n_prompts / n_groups: their prompts and groups), what "
                "every mean rests on except entropy",
    "n_entropy": "per depth: the rounds with a full attention row (--full-every), the only ones entropy rests on; "
                 "n_entropy_prompts / n_entropy_groups: their prompts and groups (the entropy CI's clusters)",
    "n_alpha": "EAGLE n-alpha: acceptance at depth d among chains whose depths < d were accepted",
    "al_per_doubling": "least-squares slope of acceptance length vs log2(context length); _lo / _hi / _se: 95% CI "
                       "and SD over 10,000 group-bootstrap refits (none below 6 groups)",
    "breakeven_al": "1 + K * c, c = drafter step cost / target verify cost (rounds.draft_s / K over "
                    "rounds.verify_s); speculation pays while acceptance length exceeds it",
    "breakeven_context": "context length where the fitted acceptance-length trend crosses breakeven_al",
    "trained_window": "--trained-window, else the drafter config's trained_window, else "
                      "rope_scaling.original_max_position_embeddings, else max_position_embeddings "
                      "(assumed: true); a round is beyond when its deepest query position >= it",
}


def records(df: pd.DataFrame) -> list[dict]:
    return df.replace({np.nan: None}).to_dict(orient="records")


def statistics_json(cmp: Comparison) -> dict:
    """Paired trends, drafter differences, their power, and the populations and groups they rest on."""
    return {"groups": cmp.groups_note(), "mode": cmp.mode, "baseline": cmp.baseline,
            "populations": stats.POPULATION_TEXT, "trends": records(cmp.trends()),
            "trend_differences": records(cmp.trend_differences()),
            "acceptance_differences": records(cmp.acceptance_differences()),
            "method": stats.__doc__.strip()}


def where_json(cmp: Comparison) -> dict:
    try:
        return {"by_depth": records(cmp.where()),
                "top_positions": {d: records(cmp.top_positions(d)) for d in (1, cmp.depth)}}
    except DriftError as e:  # the heads table is unreadable: the other statistics still stand
        return {"error": str(e)}


def comparison_json(cmp: Comparison, breakeven: float | None = None) -> dict:
    """Everything `compare --json` prints."""
    return {
        "series": [{"label": s.label, "trace": str(s.trace.path), "drafter": s.drafter} for s in cmp.series],
        "notes": cmp.notes, "summary": records(cmp.summary()), "recency_curve": records(cmp.recency_curve()),
        "contrasts": records(cmp.contrasts()), "per_depth": records(cmp.per_depth()),
        "per_depth_prefix_correct": records(cmp.per_depth(population="prefix_correct")),
        "statistics": statistics_json(cmp),
        "training": records(cmp.training()),
        "by_context": records(cmp.by_context().astype({"context_bucket": str})),
        "predictors": records(cmp.predictors()),
        "long_context_decay": {"trend": records(decay_table(cmp, breakeven)), "by_context": records(context_curve(cmp))},
        "trained_window": {"windows": windows(cmp), "any_beyond": any_beyond(cmp), "split": records(window_split(cmp))},
        "where_attention": where_json(cmp),
        "acceptance_definitions": ACCEPTANCE_DEFINITIONS,
        "definitions": DEFINITIONS,
    }
