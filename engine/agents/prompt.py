"""PROMPT.md: what a coding agent reads at the start of its turn.

Rendered into the attempt's worktree before the agent's command runs. It restates the
contract in its own words (KDA.md §1 interface, §2 math, §5 correctness; the full file is
not pasted), then the task's shapes, the rules of a turn, the frontier with per-shape
timings (never an average), the feedback of the last evaluations and the operator's notes.
"""

from __future__ import annotations

from ..task import Task
from .base import AgentContext, MemberView, Plan

FORBIDDEN = "fla, fla_core, flash_kda or kdatui"


def _num(v: float | None, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}g}"


def cell_text(cell: dict | None) -> str:
    """One matrix cell: '1.23x 0.4561 ms' when it passed, else the verdict."""
    if not cell:
        return "-"
    verdict = cell.get("verdict") or "-"
    if verdict != "PASS":
        return verdict
    sp, ms = cell.get("speedup"), cell.get("ms")
    parts = []
    if sp is not None:
        parts.append(f"{sp:.3g}x")
    if ms is not None:
        parts.append(f"{_num(ms)} ms")
    return " ".join(parts) or "PASS"


def _shape_order(task: Task) -> list[str]:
    return [task.primary_shape] + [s for s in task.shapes if s != task.primary_shape]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    out = ["| " + " | ".join(esc(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return out


def shapes_section(task: Task) -> list[str]:
    rows = []
    for name in _shape_order(task):
        s = task.shapes[name]
        rows.append([name, s.B, s.T, s.H, s.K, s.V, "primary" if name == task.primary_shape else ""])
    scoring = ("The search scores the primary shape; the other shapes must pass the contract and must not get "
               "slower beyond noise." if len(task.shapes) > 1 else
               "The task has one shape: it is the score.")
    return ["## Shapes", "", *_table(["shape", "B", "T", "H", "K", "V", ""], rows), "",
            scoring + " Nothing is averaged across shapes.", ""]


def frontier_section(task: Task, members: list[MemberView]) -> list[str]:
    out = ["## The frontier (kept candidates, per shape: speedup over the baseline and candidate ms)", ""]
    if not members:
        return out + ["No member yet: the first passing candidate of a family is kept.", ""]
    order = _shape_order(task)
    header = ["member", "family"] + [f"{s} (primary)" if s == task.primary_shape else s for s in order]
    baseline = []
    for s in order:
        ms = next((m.cells[s].get("baseline_ms") for m in members
                   if s in m.cells and m.cells[s].get("baseline_ms") is not None), None)
        baseline.append(f"{_num(ms)} ms" if ms is not None else "-")
    rows = [[f"baseline ({task.bench.baseline})", ""] + baseline]
    for m in members:
        rows.append([m.name + (" (best)" if m.best else ""), m.family] + [cell_text(m.cells.get(s)) for s in order])
    out += _table(header, rows) + [""]
    for m in members:
        where = f"`git show frontier/{task.name}/{m.name}:candidates/{task.name}/kernel.py`"
        if m.kernel_path:
            where = f"`{m.kernel_path}` (or {where})"
        idea = " ".join(m.idea.split()) if m.idea else "(no idea recorded)"
        if len(idea) > 300:
            idea = idea[:299].rstrip() + "…"
        if not idea.endswith((".", "!", "?", "…")):
            idea += "."
        out.append(f"- **{m.name}** ({m.family}): {idea} Source: {where}.")
    return out + [""]


def history_section(ctx: AgentContext, limit: int = 10) -> list[str]:
    recent = ctx.history[-limit:]
    if not recent:
        return []
    out = ["## Recent attempts (newest last)", ""]
    for a in recent:
        parent = (a.parent or "base").rsplit("/", 1)[-1]
        cell = a.cells.get(ctx.primary)
        primary = f", primary {cell_text(cell)}" if cell else ""
        why = f" — {a.reason}" if a.reason and a.verdict != "passed" else ""
        out.append(f"- #{a.id} {a.name} ({a.family}, from {parent}): {a.verdict or a.status}{primary}{why}")
    return out + [""]


def contract_section(task: Task) -> list[str]:
    c = task.contract
    probes = ", ".join(c.probes)
    return [
        "## The contract",
        "",
        "### Interface",
        "",
        "`kernel.py` defines",
        "",
        "```python",
        "def kda_forward(q, k, v, g, beta, A_log, dt_bias, *, scale, lower_bound,",
        "                initial_state=None, output_final_state=True) -> (o, final_state)",
        "```",
        "",
        "- `q`, `k`, `g`: [B, T, H, K] bf16 (raw: q and k not normalized, g before its activation);",
        "  `v`: [B, T, H, V] bf16; `beta`: [B, T, H] bf16 logits; `A_log`: [H] fp32; `dt_bias`: [H, K] fp32.",
        "- `scale` defaults to K**-0.5; `lower_bound` is in [-5, 0).",
        "- `initial_state` / `final_state`: [B, H, V, K] fp32, V-first; `initial_state=None` means zeros;",
        "  `final_state` is None only when `output_final_state` is False.",
        "- `o`: [B, T, H, V] bf16, a new dense tensor (never a view of an input; inputs are not modified).",
        "- Everything happens inside the call and is timed: the norms, the gate, the beta sigmoid, the",
        "  recurrence, the output. A workspace may be kept between calls, results may not.",
        "- Any T >= 1 (not only multiples of a chunk), any B and H; K = V = 128 is the main case and",
        "  32 and 64 must work too.",
        "",
        "### The math (per batch b and head h, conceptually fp32)",
        "",
        "```",
        "for t in 0 .. T-1:",
        "    qn = q_t / sqrt(|q_t|^2 + 1e-6);  kn = k_t / sqrt(|k_t|^2 + 1e-6)        # K-vectors",
        "    a  = lower_bound * sigmoid(exp(A_log[h]) * (g_t + dt_bias[h]))        # log decay per channel",
        "    b  = sigmoid(beta_t)                                                   # scalar",
        "    S  = diag(exp(a)) @ S                                                  # S is K x V",
        "    r  = v_t - S^T kn                                                      # residual, V-vector",
        "    S  = S + b * outer(kn, r)",
        "    o_t = scale * S^T qn                                                   # from the updated state",
        "```",
        "",
        "o is rounded to bf16; the final state stays fp32 (stored transposed, V x K). Fast kernels use",
        "the chunked (WY) form of this loop. Never compute exp(G_i - G_j) as exp(G_i) * exp(-G_j) over a",
        "long span: with lower_bound -5 that overflows fp32 and gives 0 * inf = NaN.",
        "",
        "### Correctness (checked before any timing, on every shape)",
        "",
        "- Each output must be finite, of the right dtype, shape and device, and dense.",
        f"- An element fails when |x - y| > atol and |x - y| > rtol * |y|, with rtol = {c.rtol:g} and "
        f"atol = {c.atol_rms:g} x RMS(y); every element must pass.",
        f"- Normalized RMS error |x - y| / |y| (2-norms) < {c.rms:g}.",
        f"- The correlated probes (a near-singular triangular system) allow rtol {c.correlated_rtol:g}, "
        f"atol {c.correlated_atol_rms:g} x RMS(y), RMS {c.correlated_rms:g}.",
        f"- Probes: {probes}. " + ("Each runs once." if c.runs_per_probe == 1 else
                                   f"Each runs {c.runs_per_probe} times: a result that changes between runs "
                                   "(a race) fails."),
        (f"- {c.holdout} holdout probe{'s' if c.holdout != 1 else ''} with secret inputs (other distributions "
         "and decay patterns): a kernel tuned to the visible probes fails them." if c.holdout else
         "- No holdout probes in this task."),
        ("- Input dependence: inputs are perturbed in place between calls and the next output must follow "
         "them; " if c.input_dependence else "- ") + "the output of the last timed call is checked too "
        "(results may not be cached).",
        "",
    ]


def rules_section(task: Task, cdir: str, task_file: str, timeout_s: float, socket: bool) -> list[str]:
    minutes = timeout_s / 60
    queue = (" They go through the run's evaluator queue (KDATUI_ENGINE_SOCKET is set), so they never "
             "collide with another job on the GPU." if socket else "")
    return [
        "## Rules of a turn",
        "",
        f"- Candidate folder: `{cdir}/`. Write `{cdir}/kernel.py` exposing `kda_forward` and "
        f"`{cdir}/IDEA.md`. Other `.py` files in that folder belong to the candidate too.",
        f"- Self-contained: the candidate imports nothing from {FORBIDDEN}, nor from other candidates or "
        "scratch files. torch and triton are fine. Copy no code from fla or FlashKDA; derive it from the math.",
        "- IDEA.md: a first line `family: <name>` (fused, split, wide, or a new family name when the structure is "
        "new), optionally `name: <short-descriptive-slug>` (e.g. `split-bv32-c16`), then one paragraph: "
        "the idea, what changed against the parent, and what it should gain.",
        f"- Check: `kdatui check --task {task_file} --candidate {cdir}`",
        f"- Time: `kdatui bench --task {task_file} --candidate {cdir}` (add `--shapes {task.primary_shape}` "
        "for the primary shape only)." + queue,
        f"- Change nothing outside `{cdir}/` that git tracks, and do not commit or switch branches: kdatui "
        "commits a kept candidate itself, and other changes block it.",
        f"- The turn has {minutes:.0f} minutes; a turn that runs past them is killed and not evaluated. When "
        "the candidate is written and checked, stop: kdatui evaluates what the folder holds.",
        "",
    ]


def start_section(task: Task, plan: Plan, cdir: str) -> list[str]:
    if plan.parent:
        where = (f"This worktree is a branch from the frontier member **{plan.parent}** ({plan.family}); "
                 f"`{cdir}/` holds its kernel. Make it faster, or try something new.")
    else:
        where = (f"This worktree is at the run's base commit; `{cdir}/` may not exist yet. Write a kernel, "
                 "starting from a frontier member's source if one helps.")
    return ["## Where you start", "", where, ""]


def render_prompt(ctx: AgentContext, plan: Plan, *, agent: str, cdir: str, task_file: str,
                  timeout_s: float) -> str:
    task = ctx.task
    lines = [
        f"# Turn of {agent}: a faster KDA forward kernel for task {task.name}",
        "",
        "You are one turn of kdatui's search for fast Kimi Delta Attention forward kernels in Triton. "
        f"Write one candidate into `{cdir}/`, check it, and stop. kdatui then runs the full "
        "correctness contract and paired timing against the baseline, and keeps the candidate when it is "
        "the fastest on the primary shape or beats the member of its family.",
        "",
    ]
    lines += ["## Notes from the operator (read first)", ""]
    if ctx.notes:
        lines += [f"- {' '.join(n.split())}" for n in ctx.notes] + [""]
    else:
        lines += ["(none)", ""]
    lines += start_section(task, plan, cdir)
    lines += contract_section(task)
    lines += shapes_section(task)
    lines += rules_section(task, cdir, task_file, timeout_s, ctx.engine_socket is not None)
    lines += frontier_section(task, ctx.members)
    lines += ["## Feedback from the last evaluations", ""]
    lines += ([f"- {f}" for f in ctx.feedback] if ctx.feedback else ["(no evaluation yet)"]) + [""]
    lines += history_section(ctx)
    return "\n".join(lines) + "\n"
