"""analysis/: what is read out of traces: statistics, compare, check, decay, views."""
