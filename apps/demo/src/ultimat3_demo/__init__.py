"""The ``x demo`` workload (an app of the workspace; ``x demo`` comes from its entry point)."""
