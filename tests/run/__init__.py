"""run/: running and capturing: the speculative loops, verification, capture, engines, the runner."""
