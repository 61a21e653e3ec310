"""`kdatui run`, `attach`, `status`, `pause`, `resume`, `note`, `stop`: the engine's
process and the CLI clients of its control socket."""

from __future__ import annotations

import json
import sys
import time

from .common import EXIT_OK, UserError, frontier_dir, load_task_ref

def _client(timeout: float | None = 30.0):
    from kdatui.engine.protocol import Client, EngineUnavailable, socket_path

    try:
        return Client(socket_path(frontier_dir()), timeout=timeout)
    except EngineUnavailable as e:
        raise UserError(f"{e}; start one with `kdatui run TASK`") from None


def _request(cmd: str, **args) -> dict:
    from kdatui.engine.protocol import EngineError, EngineUnavailable

    try:
        with _client(timeout=None if cmd in ("generalize", "recheck", "archive", "evaluate") else 30.0) as c:
            return c.request(cmd, **args)
    except EngineError as e:
        raise UserError(str(e)) from None
    except EngineUnavailable as e:
        raise UserError(str(e)) from None


# --------------------------------------------------------------------------- run

def start_engine(task_ref: str, agent: str, budget: str | None, *, resume: str | None = None,
                 idle_stop: str | None = None) -> dict:
    """Start the engine in its own session (it outlives this terminal) and wait until it
    answers on its socket. Returns its status."""
    from kdatui.engine.launch import LaunchError
    from kdatui.engine.launch import start_engine as launch

    task = load_task_ref(task_ref)
    frontier_dir()  # a clear error outside a git repo
    try:
        return launch(task.path, agent=agent, budget=budget, resume=resume, idle_stop=idle_stop)
    except LaunchError as e:
        raise UserError(str(e)) from None


def default_task() -> str:
    """The primary task on a GPU; without one, the CPU task through the Triton interpreter."""
    import torch

    if torch.cuda.is_available():
        return "kda_fwd_b1_t8192_h96"
    print("no GPU here: running the CPU task (kda_fwd_cpu) through the Triton interpreter "
          "(TRITON_INTERPRET=1); its timings are CPU figures, not GPU ones", file=sys.stderr)
    return "kda_fwd_cpu"


def cmd_run(args) -> int:
    args.task = args.task or default_task()
    from kdatui.engine.daemon import parse_idle_stop
    from kdatui.engine.loop import Budget

    try:
        if args.budget:
            Budget.parse(args.budget)
        parse_idle_stop(args.idle_stop)
    except ValueError as e:
        raise UserError(str(e)) from None
    st = start_engine(args.task, args.agent, args.budget, resume=args.resume, idle_stop=args.idle_stop)
    how = "resumed" if st.get("resumed") else "started"
    print(f"run {st['run']} {how} on {st['task']} (engine pid {st['pid']}, agent {st['agent']}, "
          f"device {st['device']})")
    if st.get("resumed"):
        b = st.get("budget") or {}
        print(f"it keeps its budget ({_budget_text(b)}): {st['attempts']['total']} attempts made and "
              f"{st['elapsed_s'] / 60:.1f} min spent before count against it; `kdatui budget +2h` gives it more")
    if args.detach:
        print("it runs in the background: `kdatui status`, `kdatui attach`, `kdatui stop`")
        return EXIT_OK
    if not sys.stdout.isatty():
        print("(no terminal: printing the event stream; Ctrl-C detaches, the run goes on)")
        return follow()
    return attach()


def attach() -> int:
    """The TUI on the live run; `q` detaches (the run goes on)."""
    from kdatui.engine.protocol import EngineUnavailable, socket_path
    from kdatui.tui import run_tui

    try:
        how = run_tui(socket_path(frontier_dir()))
    except EngineUnavailable as e:
        raise UserError(f"{e}; start one with `kdatui run TASK`") from None
    print({"detached": "detached; the run goes on (`kdatui attach` to come back, `kdatui stop` to stop it)",
           "detached-finished": "detached; the run has finished and its engine stays up for you (`kdatui attach`, "
                                "`kdatui budget +2h` to go on, `kdatui stop` to end it)",
           "detached-paused": "detached; the run stays paused (`kdatui resume` or `kdatui attach`; `kdatui stop` "
                              "to end it)",
           "stopped": "the run is stopped",
           "lost": "the engine went away; `kdatui run TASK` resumes its run"}.get(how, how))
    return EXIT_OK


def start_or_attach() -> int:
    """`kdatui` alone: attach to the live run, or offer the tasks to start one."""
    from kdatui.engine.daemon import read_lock

    if read_lock(frontier_dir()) is not None:
        return attach()
    if not sys.stdin.isatty() or not sys.stdout.isatty():
        raise UserError("no live run here; start one with `kdatui run [TASK]` (see `kdatui --help`)")
    from kdatui.tui import pick_task

    task = pick_task()
    if task is None:
        return EXIT_OK
    st = start_engine(str(task), "builtin", None)
    print(f"run {st['run']} started on {st['task']}")
    return attach()


FINAL_EVENTS = ("budget", "run-stopped")  # the run finished (budget, nothing left) or stopped


def follow(until_finished: bool = True) -> int:
    """Print the event stream (no TUI) until the run finishes; Ctrl-C detaches, the run
    goes on."""
    try:
        with _client(timeout=None) as c:
            for ev in c.events(backlog=50):
                print(f"{time.strftime('%H:%M:%S', time.localtime(ev['ts']))} {ev.get('text', ev['kind'])}",
                      flush=True)
                if until_finished and ev["kind"] in FINAL_EVENTS and ev["ts"] > time.time() - 5:
                    print()
                    try:
                        print(_fmt_status(_request("status")))
                    except UserError:
                        print("the run stopped; the engine is gone")
                    return EXIT_OK
    except KeyboardInterrupt:
        print("\ndetached; the run goes on")
    except Exception as e:  # the engine went away
        print(f"the engine went away ({e})")
    return EXIT_OK


def cmd_attach(args) -> int:
    _request("status")  # a clear error when nothing runs
    return follow() if args.follow else attach()


# --------------------------------------------------------------------------- clients

def _budget_text(b: dict) -> str:
    from kdatui.engine.loop import Budget

    return Budget(b.get("hours") or 0.0, b.get("attempts") or 0).text()


def _fmt_status(st: dict) -> str:
    best = st.get("best")
    att = st["attempts"]
    budget = _budget_text(st.get("budget") or {})
    lines = [
        f"run       {st['run']}  (task {st['task']}, {st['phase']}, agent {st['agent']}, pid {st['pid']})",
        f"state     {st['state']}" + (f": {st['why']}" if st.get("why") else ""),
        f"elapsed   {st['elapsed_s'] / 60:.1f} min of budget {budget}",
        f"attempts  {att['total']} ({att['evaluated']} evaluated, {att['admitted']} admitted"
        + (f", {att['raced']} raced out" if att.get("raced") else "")
        + (f"; {att['per_hour']:.1f} an hour" if att.get("per_hour") else "") + f"); "
        f"{st['members']} frontier members",
        "best      " + (f"{best['name']} {best['speedup']:.2f}x on {best['shape']}" if best else "none yet"),
        f"device    {st['device']}",
    ]
    if st.get("current"):
        cur = st["current"]
        lines.append(f"now       #{cur.get('attempt')} {cur.get('stage')}: {cur.get('detail', '')}")
    if st.get("next_cleanup_s") is not None:
        lines.append(f"cleanup   in {st['next_cleanup_s'] / 3600:.1f} h")
    return "\n".join(lines)


def cmd_status(args) -> int:
    st = _request("status")
    print(json.dumps(st, indent=2) if args.json else _fmt_status(st))
    return EXIT_OK


def _simple(cmd: str, **kw):
    def run(args) -> int:
        extra = {k: getattr(args, k) for k in kw}
        res = _request(cmd, **extra)
        print(res.get("text") or (f"{cmd}: " + ", ".join(f"{k}={v}" for k, v in res.items()) if res else f"{cmd}: done"))
        return EXIT_OK
    return run


def cmd_budget(args) -> int:
    res = _request("budget", change=" ".join(args.change).replace(" ", ","))
    print(res["text"])
    return EXIT_OK


def cmd_note(args) -> int:
    res = _request("note", text=" ".join(args.text))
    print(f"note queued for the agent's next turn ({res['pending']} pending)")
    return EXIT_OK


def register(sub) -> None:
    s = sub.add_parser("run", help="start a run of a task in the background and attach to it")
    s.add_argument("task", nargs="?", help="task file or name (default: kda_fwd_b1_t8192_h96 on a GPU, "
                                           "kda_fwd_cpu without one)")
    s.add_argument("--agent", default="builtin", help="builtin, or a configured command agent (NAME[,NAME...])")
    s.add_argument("--budget", help="e.g. 6h, 90m, 50attempts, or 2h,50attempts (default: the task's)")
    s.add_argument("--detach", action="store_true", help="start and return; the run goes on")
    s.add_argument("--resume", metavar="RUN", help="resume this run instead of starting one (a crashed run of "
                                                   "the task is resumed anyway; it keeps its budget)")
    s.add_argument("--idle-stop", metavar="TIME", help="once the run has finished, the engine exits after this long "
                                                       "with no client attached (default 24h; `never`)")
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("attach", help="attach to the live run of this repo")
    s.add_argument("--follow", action="store_true", help="print the event stream instead of the TUI")
    s.set_defaults(func=cmd_attach)

    s = sub.add_parser("status", help="state of the live run")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_status)

    for verb, what in (("pause", "pause the run after the current step"), ("resume", "resume a paused run"),
                       ("stop", "stop the run (the engine exits)")):
        s = sub.add_parser(verb, help=what)
        s.set_defaults(func=_simple(verb))

    s = sub.add_parser("budget", help="show the run's budget, or give the live or finished run more: +2h, "
                                      "+20attempts (8h sets it)")
    s.add_argument("change", nargs="*", help="+2h, +20attempts, 8h, 50attempts; several: +1h +10attempts")
    s.set_defaults(func=cmd_budget)

    s = sub.add_parser("note", help="leave the agent a note (it reads it on its next turn)")
    s.add_argument("text", nargs="+")
    s.set_defaults(func=cmd_note)


__all__ = ["register", "start_engine", "attach", "follow", "start_or_attach"]
