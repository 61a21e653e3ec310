"""Planted fault: never returns, ignores SIGTERM and SIGINT while it spins, and (when the
test asks, through KDATUI_TEST_CHILD_PIDFILE) leaves a child process behind, which a
timeout must kill along with the worker."""

import os
import signal
import subprocess


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    pidfile = os.environ.get("KDATUI_TEST_CHILD_PIDFILE")
    if pidfile:
        child = subprocess.Popen(["sleep", "600"])
        with open(pidfile, "w") as f:
            f.write(str(child.pid))
    n = 0
    while True:
        n += 1
