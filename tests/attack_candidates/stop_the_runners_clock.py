"""Attack, deeper: find the runner's own clock (its module's `_perf`, through sys.modules and
the frames above) and replace that too, so the times it reports shrink while nothing it checks
looks replaced. The judge's own clock is out of reach: the batch's wall time stands, and the
candidate is credited with it."""

import sys
import time

from _honest import honest

_real = time.perf_counter
_paused = [0.0]


def _clock():
    return _real() - _paused[0]


def _bend():
    for mod in list(sys.modules.values()):
        if getattr(mod, "_perf", None) is _real or getattr(mod, "_perf", None) is time.perf_counter:
            mod._perf = _clock
    f = sys._getframe()
    while f is not None:
        if f.f_globals.get("_perf") is not None and f.f_globals.get("_perf") is not _clock:
            f.f_globals["_perf"] = _clock
        f = f.f_back


def kda_forward(*args, **kwargs):
    _bend()
    t0 = _real()
    out = honest.kda_forward(*args, **kwargs)
    _paused[0] += _real() - t0
    return out
