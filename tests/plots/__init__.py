"""plots/: the figure builders."""
