"""`kdatui frontier list|show|diff|prune|restore`, `kdatui archive`, `kdatui generalize`.

Each works on the repo of the current directory (git finds its root) and prints what it
did. Frontier, store and git problems (not a repo, no commits, a dirty tree, an unknown
member) are one-line errors.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

from .common import EXIT_FAILED, EXIT_OK, UserError, frontier_dir, load_task_ref, rel_path


def _user_errors(fn):
    @functools.wraps(fn)
    def run(args):
        from kdatui.engine.store import FrontierError

        try:
            return fn(args)
        except FrontierError as e:
            raise UserError(str(e)) from None

    return run


def _open():
    from kdatui.engine.frontier import Frontier

    return Frontier.open(Path.cwd())


def _console():
    from rich.console import Console

    return Console(highlight=False)


def _x(v) -> str:
    return "-" if v is None else f"{v:.3g}x"


def _ms(v) -> str:
    return "-" if v is None else f"{v:.4g}"


def _shape_order(fr, task_name: str, members) -> list[str]:
    info = fr.store.task(task_name)
    if info:
        return list(info.shapes)
    return list(dict.fromkeys(e.shape for m in members for e in fr.evaluations(m)))


# --------------------------------------------------------------------------- frontier


def _cell_dict(e) -> dict:
    return {"verdict": e.verdict, "speedup": e.speedup, "candidate_ms": e.candidate_ms,
            "baseline_ms": e.baseline_ms, "noise": e.noise}


def frontier_data(fr, task_name: str) -> dict:
    """A task's frontier as plain data (`kdatui frontier list --json`)."""
    members = fr.members(task_name)
    info = fr.store.task(task_name)
    return {"task": task_name, "primary_shape": info.primary_shape if info else None,
            "shapes": _shape_order(fr, task_name, members),
            "members": [{"name": m.name, "family": m.family, "best": m.best, "branch": m.branch, "sha": m.sha,
                         "attempt": m.attempt, "why": m.why,
                         "cells": {e.shape: _cell_dict(e) for e in fr.evaluations(m)}} for m in members],
            "pruned": [m.name for m in fr.store.members(task_name, states=("pruned",))]}


def _cell_text(e) -> str:
    if e is None:
        return "-"
    if e.verdict != "PASS":
        return f"[red]{e.verdict}[/]"
    return f"{_x(e.speedup)}\n{_ms(e.candidate_ms)} ms"


def _member_table(fr, task_name, members, shapes, primary):
    """Members as rows, shapes as columns (few shapes)."""
    from rich.table import Table

    t = Table(title=f"frontier of {task_name}  (* primary shape; cells: speedup, candidate ms)")
    t.add_column("member", no_wrap=True)
    t.add_column("family", no_wrap=True)
    for s in shapes:
        t.add_column(s + (" *" if s == primary else ""), justify="right")
    t.add_column("why kept")
    for m in members:
        cells = {e.shape: e for e in fr.evaluations(m)}
        t.add_row(m.name + (" [bold green](best)[/]" if m.best else ""), m.family,
                  *[_cell_text(cells.get(s)) for s in shapes], m.why)
    return t


def _shape_table(fr, task_name, members, shapes, primary):
    """Transposed: shapes as rows, members as columns (many shapes, or a narrow terminal)."""
    from rich.table import Table

    t = Table(title=f"frontier of {task_name}  (shapes as rows; * primary shape; cells: speedup, candidate ms)")
    t.add_column("shape", no_wrap=True)
    for m in members:
        t.add_column(f"{m.name}\n({m.family}{', best' if m.best else ''})", justify="right")
    cells = {m.name: {e.shape: e for e in fr.evaluations(m)} for m in members}
    for s in shapes:
        t.add_row(s + (" *" if s == primary else ""), *[_cell_text(cells[m.name].get(s)) for m in members])
    return t


@_user_errors
def cmd_list(args) -> int:
    import json

    con = _console()
    with _open() as fr:
        tasks = [args.task] if args.task else fr.store.tasks_with_members()
        if args.json:
            print(json.dumps({"repo": str(fr.repo.root), "tasks": [frontier_data(fr, t) for t in tasks]}, indent=2))
            return EXIT_OK
        if not tasks:
            print(f"no frontier members yet in {fr.repo.root}")
            return EXIT_OK
        for task_name in tasks:
            members = fr.members(task_name)
            info = fr.store.task(task_name)
            primary = info.primary_shape if info else ""
            shapes = _shape_order(fr, task_name, members)
            # member, family and why need ~60 columns, each shape ~12: too many shapes for the
            # width and the columns get cut (`fami…`), so the table turns: shapes as rows
            wide = 60 + 12 * len(shapes) <= con.width
            if wide:
                con.print(_member_table(fr, task_name, members, shapes, primary))
            else:
                con.print(_shape_table(fr, task_name, members, shapes, primary))
                for m in members:
                    print(f"  {m.name}: {m.why}")
            pruned = fr.store.members(task_name, states=("pruned",))
            if pruned:
                print(f"pruned ({len(pruned)}): {', '.join(m.name for m in pruned)}  "
                      f"(kdatui frontier restore NAME brings one back)")
        print(f"index: {rel_path(fr.index_path)}")
    return EXIT_OK


@_user_errors
def cmd_show(args) -> int:
    from rich.table import Table

    from kdatui.engine.frontier import pct
    from kdatui.engine.gitrepo import candidate_dir

    con = _console()
    with _open() as fr:
        m = _find_any(fr, args.name, args.task)
        att = fr.attempt(m.attempt)
        idea = fr.repo.show_file(m.sha, f"{candidate_dir(m.task)}/IDEA.md") or att.idea
        if args.json:
            import json

            evals = fr.evaluations(m)
            print(json.dumps({
                "task": m.task, "name": m.name, "family": m.family, "best": m.best, "state": m.state,
                "branch": m.branch, "ref": m.ref, "sha": m.sha, "attempt": att.id, "run": att.run,
                "parent": att.parent, "why": m.why, "idea": idea,
                "evaluations": [{"shape": e.shape, "dims": e.data.get("dims"), "device": e.data.get("device"),
                                 **_cell_dict(e), "checks": (e.data.get("checks") or {}).get("results")}
                                for e in evals]}, indent=2, default=str))
            return EXIT_OK
        state = "" if m.state == "member" else f"  [yellow]({m.state}; kdatui frontier restore {m.name})[/]"
        con.print(f"[bold]{m.task}/{m.name}[/]  family {m.family}"
                  + ("  [bold green]best on the primary shape[/]" if m.best else "") + state)
        print(f"branch:   {m.ref or m.branch}")
        print(f"commit:   {m.sha}")
        print(f"attempt:  {att.id} (run {att.run}, parent {att.parent})")
        print(f"why kept: {m.why}")
        print()
        print(idea.strip())
        print()
        info = fr.store.task(m.task)
        primary = info.primary_shape if info else ""
        evals = fr.evaluations(m)
        t = Table(title="per-shape timing (paired against the baseline; * primary shape)")
        for col, just in (("shape", "left"), ("dims", "left"), ("verdict", "left"), ("candidate ms", "right"),
                          ("baseline ms", "right"), ("speedup", "right"), ("noise", "right"), ("device", "left")):
            t.add_column(col, justify=just)
        for e in evals:
            dims = e.data.get("dims") or {}
            label = " ".join(f"{k}{v}" for k, v in dims.items())
            t.add_row(e.shape + (" *" if e.shape == primary else ""), label, _verdict(e.verdict),
                      _ms(e.candidate_ms), _ms(e.baseline_ms), _x(e.speedup),
                      pct(e.noise), e.data.get("device", ""))
        con.print(t)
        _checks_table(con, evals)
    return EXIT_OK


def _verdict(v: str) -> str:
    from .render import VERDICT_STYLE

    return f"[{VERDICT_STYLE.get(v, 'white')}]{v}[/]"


def _checks_table(con, evals) -> None:
    from rich.table import Table

    results = {e.shape: {r["probe"]: r for r in ((e.data.get("checks") or {}).get("results") or [])}
               for e in evals}
    probes = list(dict.fromkeys(p for rs in results.values() for p in rs))
    if not probes:
        print("checks: none recorded")
        return
    t = Table(title="checks (verdict, normalized RMS error)")
    t.add_column("check")
    for e in evals:
        t.add_column(e.shape)
    problems = []
    for p in probes:
        row = [p]
        for e in evals:
            r = results[e.shape].get(p)
            if r is None:
                row.append("-")
                continue
            row.append(f"{_verdict(r['verdict'])} {r.get('rms_ratio', 0):.2g}")
            if r["verdict"] != "PASS":
                problems.append(f"{e.shape} {p}: {r.get('reason', '')}")
        t.add_row(*row)
    con.print(t)
    for line in problems:
        print(f"  {line}")


def _find_any(fr, name: str, task: str | None):
    """A live member, else a pruned one of that name."""
    from kdatui.engine.store import FrontierError

    try:
        return fr.find(name, task)
    except FrontierError:
        try:
            return fr.find(name, task, states=("pruned",))
        except FrontierError:
            pass
        raise


@_user_errors
def cmd_diff(args) -> int:
    from kdatui.engine.gitrepo import candidate_dir

    with _open() as fr:
        a = _find_any(fr, args.a, args.task)
        b = _find_any(fr, args.b, args.task or a.task)
        if a.task != b.task:
            raise UserError(f"{a.name} ({a.task}) and {b.name} ({b.task}) belong to different tasks")
        print(f"diff {a.ref or a.branch} {b.ref or b.branch} -- {candidate_dir(a.task)}/", file=sys.stderr)
        text = fr.repo.diff(a.sha, b.sha, f"{candidate_dir(a.task)}/")
        print(text if text else f"no difference between {a.name} and {b.name}")
    return EXIT_OK


def _live_engine():
    """A client of this repo's live engine, or None. With an engine running, actions go
    through it: it serializes them with the run and owns the GPU (the evaluator)."""
    from kdatui.engine.protocol import Client, EngineUnavailable, socket_path

    try:
        return Client(socket_path(frontier_dir()), timeout=None)
    except (EngineUnavailable, OSError):
        return None


def _via_engine(cmd: str, **args) -> dict | None:
    from kdatui.engine.protocol import EngineError

    client = _live_engine()
    if client is None:
        return None
    with client:
        try:
            return client.request(cmd, **args)
        except EngineError as e:
            raise UserError(str(e)) from None


@_user_errors
def cmd_prune(args) -> int:
    if args.task is None and (res := _via_engine("prune", name=args.name)) is not None:
        print(f"pruned {res['name']} (by the live engine): moved to {res['ref']} "
              f"(kdatui frontier restore {res['name']} brings it back)")
        return EXIT_OK
    with _open() as fr:
        m = fr.prune(args.task, args.name, args.reason or "pruned by the operator")
        print(f"pruned {m.task}/{m.name}: branch {m.branch} moved to {m.ref} "
              f"(kdatui frontier restore {m.name} brings it back)")
        best = [x.name for x in fr.members(m.task) if x.best]
        if best:
            print(f"best on the primary shape of {m.task}: {best[0]}")
    return EXIT_OK


@_user_errors
def cmd_restore(args) -> int:
    if args.task is None and (res := _via_engine("restore", name=args.name)) is not None:
        print(f"restored {res['name']} (by the live engine): branch {res['branch']}")
        return EXIT_OK
    with _open() as fr:
        m = fr.restore(args.task, args.name)
        print(f"restored {m.task}/{m.name}: branch {m.branch} at {m.sha[:12]}")
    return EXIT_OK


# --------------------------------------------------------------------------- archive


@_user_errors
def cmd_archive(args) -> int:
    from kdatui.engine.archive import archive_root, cleanup, restore_attempt

    if args.restore is None and args.run is None and (res := _via_engine("archive")) is not None:
        for line in res.get("lines") or ["nothing to archive"]:
            print(line)
        print(f"(done by the live engine) archive folder: {archive_root()}; the frontier branches stay")
        return EXIT_OK
    with _open() as fr:
        if args.restore is not None:
            att = restore_attempt(fr, args.restore)
            print(f"restored attempt {att.id}: worktree {att.worktree} on branch {att.branch} ({att.status})")
            return EXIT_OK
        reports = cleanup(fr, args.run, keep_events_s=args.keep_events_hours * 3600.0)
        if not reports:
            print("no runs to archive")
        for r in reports:
            for line in r.lines():
                print(line)
        print(f"archive folder: {archive_root() / fr.repo.name}; the frontier branches stay")
    return EXIT_OK


# --------------------------------------------------------------------------- generalize


def make_evaluator(task):
    """The real evaluator (tests replace this function)."""
    try:
        from kdatui.engine.evaluator import make_evaluator as make
    except ImportError as e:
        raise UserError(f"generalize needs the evaluator (kdatui.engine.evaluator), which cannot be "
                        f"imported here: {e}") from None
    return make()


def _check_specs(specs: list[str]) -> None:
    """Shapes that cannot parse are an error before anything is asked of the engine."""
    from kdatui.engine.task import TaskError, parse_shape_spec

    for spec in (p.strip() for s in specs for p in s.split(";")):
        if spec:
            try:
                parse_shape_spec(spec)
            except TaskError as e:
                raise UserError(str(e) if repr(spec) in str(e) else f"shape {spec!r}: {e}") from None


@_user_errors
def cmd_generalize(args) -> int:
    from kdatui.engine.generalize import generalize, parse_extra_shapes, plan_text, task_file_note

    from .render import progress_bar

    _check_specs(args.shapes)
    if not args.task and not args.name and (client := _live_engine()) is not None:
        from kdatui.engine.protocol import EngineError

        req = dict(shapes=list(args.shapes), task_out=args.task_out, continue_search=args.continue_search,
                   **{"from": args.from_})
        with client:
            try:
                plan = client.request("generalize", dry_run=True, **req)  # validated before any wait
                print(f"the live engine will {plan['plan']}; this waits for the re-check...")
                res = client.request("generalize", **req)
            except EngineError as e:
                raise UserError(str(e)) from None
        print(f"wrote task {res['task']}: {res.get('task_file_note') or rel_path(res['task_file'])}; its frontier "
              f"starts with {res['member']}")
        print(f"the engine continues the search on it in run {res['run']}" if res.get("continued") else
              f"the search stays on the old task; `kdatui run {rel_path(res['task_file'])}` searches the new one")
        for f in res.get("failures") or []:
            print(f"  fails on {f}")
        return EXIT_OK
    with _open() as fr:
        if args.task:
            task = load_task_ref(args.task)
            m = fr.find(args.from_, task.name)
        else:
            m = fr.find(args.from_, None)
            info = fr.store.task(m.task)
            known = info.path if info and info.path and Path(info.path).exists() else None
            task = load_task_ref(known or m.task)  # else tasks/<task>.toml or a bundled task
        extra = parse_extra_shapes(task, args.shapes)  # bad shapes fail before any work starts
        print(plan_text(task, m.name, extra, args.task_out, False).replace(
            "the search stays on " + task.name, "no engine runs here: `kdatui run` starts the search"), file=sys.stderr)
        evaluator = make_evaluator(task)
        try:
            with progress_bar(f"evaluate {m.name}", quiet=args.quiet) as update:
                def progress(event=None, *rest):
                    if isinstance(event, dict) and event.get("total"):
                        update(event.get("done", 0), event["total"],
                               f"{event.get('shape', '')} {event.get('label', '')}".strip())

                result = generalize(fr, task, m.name, args.shapes, evaluator=evaluator,
                                    task_out=args.task_out, new_name=args.name, progress=progress)
        finally:
            close = getattr(evaluator, "close", None)
            if close:
                close()
        print(f"wrote task {result.task.name}: {task_file_note(fr, result.task_path)} "
              f"({len(result.task.shapes)} shapes: {', '.join(result.task.shapes)}; primary {result.task.primary_shape})")
        print(f"seeded its frontier with {result.member}: branch {result.branch} "
              f"(from {m.branch} at {m.sha[:12]})")
        for e in result.evaluations:
            print(f"  {e.shape}: {e.verdict}  {_x(e.speedup)}  candidate {_ms(e.candidate_ms)} ms, "
                  f"baseline {_ms(e.baseline_ms)} ms" + (f"  ({e.data.get('reason')})" if e.data.get("reason") else ""))
        if result.failures:
            print(f"{result.member} fails on {len(result.failures)} shape(s): the search starts from it to fix that")
        print(f"next: kdatui run {rel_path(result.task_path)}")
    return EXIT_OK


@_user_errors
def cmd_recheck(args) -> int:
    """Re-check and re-time a member on every shape of its task."""
    res = _via_engine("recheck", name=args.name) if not args.task else None
    if res is not None:
        cells = res.get("cells", {})
    else:
        from kdatui.engine.generalize import recheck

        with _open() as fr:
            m = fr.find(args.name, load_task_ref(args.task).name if args.task else None)
            info = fr.store.task(m.task)
            task = load_task_ref(args.task or (info.path if info and info.path and Path(info.path).exists()
                                               else m.task))
            evaluator = make_evaluator(task)
            try:
                evs = recheck(fr, task, m.name, evaluator=evaluator)
            finally:
                evaluator.close()
        cells = {e.shape: {"verdict": e.verdict, "speedup": e.speedup, "ms": e.candidate_ms} for e in evs}
    print(f"rechecked {args.name}:")
    for shape, c in cells.items():
        print(f"  {shape}: {c['verdict']}  {_x(c.get('speedup'))}  {_ms(c.get('ms'))} ms")
    return EXIT_OK if all(c["verdict"] == "PASS" for c in cells.values()) else EXIT_FAILED


# --------------------------------------------------------------------------- registration


def register(sub) -> None:
    s = sub.add_parser("frontier", help="the kept candidates (git branches frontier/<task>/<name>)")
    fsub = s.add_subparsers(dest="frontier_verb", metavar="ACTION", required=True)

    p = fsub.add_parser("list", help="every member, per shape")
    p.add_argument("--task", help="only this task's frontier")
    p.add_argument("--json", action="store_true", help="print the frontiers as JSON")
    p.set_defaults(func=cmd_list)

    p = fsub.add_parser("show", help="a member's idea, per-shape timings and checks")
    p.add_argument("name")
    p.add_argument("--task", help="the member's task (when several tasks have that name)")
    p.add_argument("--json", action="store_true", help="print the member as JSON")
    p.set_defaults(func=cmd_show)

    p = fsub.add_parser("diff", help="git diff of two members' candidates")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--task")
    p.set_defaults(func=cmd_diff)

    p = fsub.add_parser("prune", help="move a member's branch to refs/kdatui/pruned/ (restorable)")
    p.add_argument("name")
    p.add_argument("--task")
    p.add_argument("--reason", help="recorded with the prune")
    p.set_defaults(func=cmd_prune)

    p = fsub.add_parser("restore", help="bring a pruned member back")
    p.add_argument("name")
    p.add_argument("--task")
    p.set_defaults(func=cmd_restore)

    s = sub.add_parser("recheck", help="re-check and re-time a member on every shape of its task")
    s.add_argument("name")
    s.add_argument("--task", help="the member's task (default: found from the name)")
    s.set_defaults(func=cmd_recheck)

    s = sub.add_parser("archive", help="move scratch worktrees, attempt logs and old events to the archive")
    s.add_argument("--run", help="only this run (default: every run)")
    s.add_argument("--keep-events-hours", type=float, default=1.0,
                   help="events newer than this stay in the store (default 1)")
    s.add_argument("--restore", type=int, metavar="ATTEMPT", help="bring an archived attempt's worktree back")
    s.set_defaults(func=cmd_archive)

    s = sub.add_parser("generalize", help="a new task with more shapes, seeded from a frontier member")
    s.add_argument("--from", dest="from_", required=True, metavar="NAME", help="the frontier member")
    s.add_argument("--shapes", required=True, nargs="+", action="extend", metavar="SPEC",
                   help="new shapes: B=1,T=4096,H=64[,K=..,V=..], NAME:B=..., or b1_t4096_h64")
    s.add_argument("--task-out", help="the new task file (default tasks/<new name>.toml)")
    s.add_argument("--task", help="the member's task file (default: the one the store knows)")
    s.add_argument("--name", help="the new task's name (default from --task-out)")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.add_argument("--continue", dest="continue_search", action=argparse.BooleanOptionalAction, default=True,
                   help="with a live engine: continue the search on the new task (default), or "
                        "--no-continue to keep searching the current one")
    s.set_defaults(func=cmd_generalize)
