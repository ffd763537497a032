"""Models: drafter configs and checkpoint layouts, the EAGLE-3 / 3.1 drafter, its attention and RoPE, the target."""
