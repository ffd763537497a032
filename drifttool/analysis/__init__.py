"""Analysis of traces: statistics, comparisons, decay, the regression gate, dashboard views, the terminal report."""
