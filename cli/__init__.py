"""kdatui: supervise a long, agent-driven search for fast KDA kernels."""

__version__ = "0.1.0"
