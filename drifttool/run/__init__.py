"""Running: probes, run settings, the speculative loop, capture hooks and the engines (hf, vllm)."""
