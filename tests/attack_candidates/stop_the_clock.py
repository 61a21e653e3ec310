"""Attack: replace time.perf_counter with a clock that stops while the candidate runs, so a
host-clock timer sees each call take almost nothing. The runner timed with its own reference
taken before the import, and notices the swap: SUSPECT, never admitted."""

import time

from _honest import honest

_real = time.perf_counter
_paused = [0.0]


def _clock():
    return _real() - _paused[0]


time.perf_counter = _clock


def kda_forward(*args, **kwargs):
    t0 = _real()
    out = honest.kda_forward(*args, **kwargs)
    _paused[0] += _real() - t0  # the time spent here never happened, for anyone reading _clock
    return out
