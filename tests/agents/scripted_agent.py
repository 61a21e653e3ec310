#!/usr/bin/env python3
"""A scripted stand-in for a coding-agent CLI, for the command-agent tests.

It behaves like `claude -p ... --output-format stream-json`: reads the prompt file given
as its first argument, finds the candidate folder the prompt names, writes
`kernel.py` (the project's plain-torch kernel with another chunk size) and `IDEA.md`
(`family: torch`) there, and prints its work as claude stream-json lines, plus one plain
stdout line and one stderr line.

    scripted_agent.py PROMPT_FILE [--mode ok|fail|hang|noop] [--chunk N] [--pidfile PATH]

The mode can also come from $SCRIPTED_AGENT_MODE (the option wins):
  ok    write the candidate, exit 0
  fail  write nothing, report an error result, exit 1
  hang  start a child that sleeps, then sleep too (for the turn timeout); with --pidfile
        both pids are written there, one a line
  noop  touch nothing, exit 0 (a turn that leaves no kernel)
Needs only the standard library (it copies the kernel's text, never imports it).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def emit(obj) -> None:
    print(json.dumps(obj), flush=True)


def assistant(*blocks) -> None:
    emit({"type": "assistant", "message": {"role": "assistant", "content": list(blocks)}})


def tool_result(text: str, error: bool = False) -> None:
    emit({"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": text, "is_error": error}]}})


def torch_kernel_source() -> str:
    """The project's plain-torch kernel: next to the tests in a checkout, else installed."""
    path = HERE.parents[1] / "kernels" / "kda" / "torch_chunked.py"
    if not path.exists():
        import importlib.util

        spec = importlib.util.find_spec("kdatui.kernels.kda.torch_chunked")
        path = Path(spec.origin)
    return path.read_text()


def candidate_folder(prompt: str) -> str:
    m = re.search(r"Candidate folder: `([^`]+?)/?`", prompt)
    if m:
        return m.group(1)
    return os.environ["KDATUI_CANDIDATE_DIR"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("prompt_file")
    ap.add_argument("--mode", default=os.environ.get("SCRIPTED_AGENT_MODE", "ok"),
                    choices=("ok", "fail", "hang", "noop"))
    ap.add_argument("--chunk", type=int, default=16,
                    help="chunk size to write; 0: the next of 16, 32, 64, 8 after the one in the folder "
                         "(a new kernel every turn, as a real agent would write)")
    ap.add_argument("--pidfile")
    args = ap.parse_args()

    prompt = Path(args.prompt_file).read_text()
    emit({"type": "system", "subtype": "init", "model": "scripted-1", "cwd": os.getcwd(), "session_id": "s1"})
    print("scripted agent: plain text on stdout", flush=True)
    print("scripted agent: a line on stderr", file=sys.stderr, flush=True)
    assistant({"type": "text", "text": f"Reading {Path(args.prompt_file).name} ({len(prompt.splitlines())} lines)."})

    if args.mode == "fail":
        assistant({"type": "text", "text": "I cannot write a kernel in this turn."})
        emit({"type": "result", "subtype": "error_during_execution", "is_error": True, "num_turns": 1,
              "duration_ms": 10, "result": "gave up"})
        return 1
    if args.mode == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        if args.pidfile:
            Path(args.pidfile).write_text(f"{os.getpid()}\n{child.pid}\n")
        assistant({"type": "text", "text": "Thinking for a very long time..."})
        time.sleep(600)
        return 0
    if args.mode == "noop":
        emit({"type": "result", "subtype": "success", "is_error": False, "num_turns": 1, "duration_ms": 5,
              "result": "nothing to do"})
        return 0

    folder = Path(candidate_folder(prompt))
    if args.chunk == 0:
        sizes = [16, 32, 64, 8]
        have = folder / "kernel.py"
        m = re.search(r"^CHUNK = (\d+)", have.read_text(), re.M) if have.exists() else None
        now = int(m.group(1)) if m else None
        args.chunk = sizes[(sizes.index(now) + 1) % len(sizes)] if now in sizes else sizes[0]
    socket = os.environ.get("KDATUI_ENGINE_SOCKET")
    if socket:
        assistant({"type": "text", "text": f"The run's engine listens on {socket}."})
    src = torch_kernel_source()
    src, n = re.subn(r"^CHUNK = \d+", f"CHUNK = {args.chunk}", src, count=1, flags=re.M)
    assert n == 1, "torch_chunked.py has no CHUNK = ... line"
    src = f"# Written by the scripted test agent: the plain-torch kernel with {args.chunk}-token chunks.\n" + src
    kernel = folder / "kernel.py"
    assistant({"type": "text", "text": "I will write a torch kernel with smaller chunks."},
              {"type": "tool_use", "id": "t1", "name": "Write", "input": {"file_path": str(kernel), "content": src}})
    folder.mkdir(parents=True, exist_ok=True)
    kernel.write_text(src)
    tool_result(f"File created successfully at: {kernel}")
    (folder / "IDEA.md").write_text(
        f"# torch, chunk {args.chunk}\n\nfamily: torch\nname: torch-c{args.chunk}\n\n"
        f"The plain-torch chunked form with {args.chunk}-token chunks: smaller triangular solves per chunk,\n"
        "more chunk steps. Expect it to trade solve cost for loop overhead.\n\nSecond paragraph, not the idea.\n")
    assistant({"type": "tool_use", "id": "t2", "name": "Bash",
               "input": {"command": f"kdatui check --task TASK --candidate {folder}", "description": "check"}})
    tool_result("PASS b1_t100_h2_k32_v32\nPASS b2_t64_h2_k64_v64")
    emit({"type": "result", "subtype": "success", "is_error": False, "num_turns": 3, "duration_ms": 1234,
          "total_cost_usd": 0.0123, "result": "Wrote a torch kernel with smaller chunks."})
    return 0


if __name__ == "__main__":
    sys.exit(main())
