"""Live drift monitor for `vllm serve`: a sampled fraction of real requests recorded in vLLM's worker, replayed off
the serving path with the capture's own maths, exported as `drifttool:` Prometheus metrics on vLLM's /metrics and
written as rolling trace segments (docs/monitor.md).

settings (DRIFTTOOL_MONITOR) -> plugin (loaded by vLLM in every process) -> attach (the worker: sampler, recorder,
spool) -> replay_worker (a child process: replay, metrics snapshot, segments) -> metrics (the API server's collector).
Nothing here imports vLLM at import time."""
