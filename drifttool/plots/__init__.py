"""Plotly figure builders shared by the dashboard (app/) and the notebook API.

Pure functions of DataFrames (the outputs of `Comparison` / `drifttool.analysis.views`): no Streamlit, no I/O.
Every series (one drafter of one trace) keeps the same colour in every figure. One module per dashboard page
(depth, heads, context, drilldown, magnitudes, rejection, trees) over what they share (base); every name is
importable from `drifttool.plots`."""

from ..analysis.compare import MIN_N
from ..styles import DASHES, KIND_STYLES, PALETTE, drafter_kind, series_style, split_label
from .base import (
    LABELS,
    N_COLUMN,
    SMALL_N_COLOR,
    SYMBOLS,
    TEMPLATE,
    TITLE_FONT,
    grid,
    label,
    log_range,
    series_colors,
    series_styles,
)
from .context import bucket_order, context_curves, context_summary
from .depth import (
    acceptance_length_bars,
    acceptance_per_depth,
    depth_curves,
    feature_rms,
    lift_curves,
    metric_by_depth,
    metric_by_trace,
    recency_profile,
)
from .drilldown import attention_row_heatmap, sink_slots
from .heads import head_diff_heatmap, head_heatmaps, head_matrix, where_attention
from .magnitudes import NONE_FLAGGED, aux_rms, massive_flags
from .patching import patch_effects, span_scan
from .rejection import correlation_table, predictor_correlations, predictor_curves
from .training import training_curves
from .trees import tree_depth_curves, tree_layout, tree_round_figure

__all__ = [
    "DASHES", "KIND_STYLES", "LABELS", "MIN_N", "NONE_FLAGGED", "N_COLUMN", "PALETTE", "SMALL_N_COLOR", "SYMBOLS",
    "TEMPLATE", "TITLE_FONT", "acceptance_length_bars", "acceptance_per_depth", "attention_row_heatmap", "aux_rms",
    "bucket_order", "context_curves", "context_summary", "correlation_table", "depth_curves", "drafter_kind",
    "feature_rms", "grid", "head_diff_heatmap", "head_heatmaps", "head_matrix", "label", "lift_curves", "log_range",
    "massive_flags", "metric_by_depth", "metric_by_trace", "patch_effects", "span_scan", "predictor_correlations", "predictor_curves", "recency_profile",
    "series_colors", "series_style", "series_styles", "sink_slots", "split_label", "training_curves", "tree_depth_curves",
    "tree_layout", "tree_round_figure", "where_attention",
]
