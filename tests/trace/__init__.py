"""trace/: the trace format: writing, reading, validating, compacting, identity."""
