"""Paired timing: the speedup and its noise come from per-trial paired ratios, so a drift
between trials that moves both sides alike (the chip's clock) cancels."""

from __future__ import annotations

import time

from kdatui.engine.timing import PairedTiming, noise_of, paired_timing


def _sleeper(seconds_per_trial, factor=1.0):
    def fn(trial):
        time.sleep(seconds_per_trial[trial] * factor)
    return fn


def test_a_drift_between_trials_cancels_in_the_paired_ratio():
    slow = [0.002, 0.004, 0.003]  # each trial twice or 1.5x the first: a 'clock' drift
    pt = paired_timing(_sleeper(slow, 2.0), _sleeper(slow, 1.0), lambda t: t, device="cpu",
                       trials=3, warmup=1, repeats=3)
    assert pt.baseline.spread > 0.4 and pt.candidate.spread > 0.4  # each side moved a lot
    assert len(pt.trial_speedups) == 3
    assert abs(pt.speedup - 2.0) < 0.25
    assert pt.noise == pt.ratio_spread and pt.noise < 0.25  # the paired ratio did not
    d = pt.to_dict()
    assert noise_of(d) == pt.noise and PairedTiming.from_dict(d).noise == pt.noise


def test_records_from_before_the_ratio_spread_give_the_larger_side_spread():
    old = {"baseline": {"median_ms": 2.0, "spread": 0.05, "trial_ms": []},
           "candidate": {"median_ms": 1.0, "spread": 0.02, "trial_ms": []},
           "speedup": 2.0, "trials": 5, "repeats": 10, "timer": "cuda_event", "flush_l2": True}
    assert PairedTiming.from_dict(old).noise == 0.05 and noise_of(old) == 0.05
    assert noise_of(None) is None
