"""The `fla` baseline as a file the baseline's executor loads: fla-core's Triton
`chunk_kda` (engine/baselines.py says which of its paths, and why)."""

from kdatui.engine.baselines import fla_kda_forward as kda_forward  # noqa: F401
