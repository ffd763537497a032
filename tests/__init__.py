"""drifttool's tests, one sub-package per stage of the package (docs/architecture.md, "Stages"); helpers in support/."""
