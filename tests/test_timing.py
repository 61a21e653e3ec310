"""Paired timing: the speedup and its noise come from per-trial paired ratios, so a drift
between trials that moves both sides alike (the chip's clock) cancels."""

from __future__ import annotations

import time

from kdatui.engine.timing import PairedTiming, bound_by_wall, bytes_moved, floor_check, noise_of, paired_timing


REPEATS = 3


def _sleeper(seconds_per_trial, factor=1.0):
    def fn(call):  # the call's fresh input is its index; its trial decides the 'clock'
        time.sleep(seconds_per_trial[max(call, 0) // REPEATS] * factor)
    return fn


def test_a_drift_between_trials_cancels_in_the_paired_ratio():
    slow = [0.002, 0.004, 0.003]  # each trial twice or 1.5x the first: a 'clock' drift
    pt = paired_timing(_sleeper(slow, 2.0), _sleeper(slow, 1.0), lambda i: i, device="cpu",
                       trials=3, warmup=1, repeats=REPEATS)
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


def test_a_batch_whose_events_fall_short_of_the_wall_is_credited_the_wall():
    # honest: events explain the wall beyond the overhead the baseline shows
    assert bound_by_wall([1.0] * 10, 10.5, 0.05) == (1.0, "")
    # a clock that stops, or work on a side stream: 10 calls report 0.1 ms, the wall says 10 ms
    credited, flag = bound_by_wall([0.1] * 10, 10.5, 0.05)
    assert abs(credited - 1.0) < 1e-9 and flag.startswith("wall-bound")
    # however short the batch: a clock that reads ~0 while the calls took 1.5 ms
    credited, flag = bound_by_wall([0.001] * 3, 1.6, 0.03)
    assert flag.startswith("wall-bound") and credited > 0.4


def test_a_time_below_the_byte_floor_is_suspect():
    assert floor_check(0.1, 0.235).startswith("below the physical floor")
    assert floor_check(0.3, 0.235) == "" and floor_check(0.1, None) == ""
    # B=1 T=8192 H=96 K=V=128: about 1.01 GB (KDA.md §6)
    assert abs(bytes_moved({"B": 1, "T": 8192, "H": 96, "K": 128, "V": 128}) / 1e9 - 1.02) < 0.02


def test_timing_records_of_the_first_wave_still_read():
    old = {"baseline": {"median_ms": 2.0, "spread": 0.05, "trial_ms": []},
           "candidate": {"median_ms": 1.0, "spread": 0.02, "trial_ms": []},
           "speedup": 2.0, "trials": 5, "repeats": 10, "timer": "cuda_event", "flush_l2": True,
           "trial_speedups": [2.0], "ratio_spread": 0.01}
    pt = PairedTiming.from_dict(old)
    assert pt.flags == [] and pt.suspect == "" and pt.baseline.host_ms is None
