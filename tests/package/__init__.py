"""The package as a whole: its import graph, metric names, one definition per concept, untrusted files."""
