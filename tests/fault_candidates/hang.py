"""Planted fault: never returns, ignores SIGTERM and SIGINT while it spins, and (when the
test asks, through KDATUI_TEST_CHILD_TAG) leaves a child process behind, `sleep 600.<tag>`,
which a timeout must kill along with the executor."""

import os
import signal
import subprocess


def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale=None, lower_bound=-5.0,
                initial_state=None, output_final_state=True):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tag = os.environ.get("KDATUI_TEST_CHILD_TAG")
    if tag:
        subprocess.Popen(["sleep", f"600.{tag}"])
    n = 0
    while True:
        n += 1
