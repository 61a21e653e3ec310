"""Planted: imports the baseline library fla inside kda_forward. The static check must
reject it before anything of it runs (importing it writes a marker the test looks for)."""

import os

_marker = os.environ.get("KDATUI_TEST_IMPORT_MARKER")
if _marker:
    with open(_marker, "w") as f:
        f.write("the candidate module was imported")


def kda_forward(q, k, v, g, beta, A_log, dt_bias, **kwargs):
    import fla  # noqa: F401

    raise AssertionError("must never run")
