"""The built-in agent: a search over the kernel families and their declared tunables.

It works offline and writes real candidates: every attempt is a family's source file with
another CONFIG (`kernels.kda.families.render`), so it is self-contained and its config can
be read back from it.

How it chooses (everything is derived from the context on every call, so a resumed run
picks up where it stopped; the only randomness is `ctx.rng`):

1. Seeds. While a seed family (`task.search.seeds`) has no attempt, try its default
   configuration from the base commit.
2. A bandit over families. Each evaluated attempt scores 1 when it improved its *own
   family's* best speedup (the primary shape while the task has one shape; any shape once
   it has several), else 0. Families are ranked by Thompson sampling over the last
   `window` scores of each family, so a family whose recent tweaks pay off gets more
   tries, but the reward never compares one family with another: a slower family is not
   punished for being slower. On top, every family keeps at least `min_share / families`
   of the attempts (a family with no passing member included), so the search is never
   greedy on the fastest family.
3. Inside a family: mostly mutate a frontier member's config (its best on the primary
   shape, sometimes another member, and once the task has several shapes sometimes the
   member that is fastest on a non-primary shape), changing one tunable, sometimes two, to
   a neighbouring allowed value; sometimes jump (re-draw about half the tunables at random,
   parent the family's best member). Tunables whose changes paid off before are picked
   more often; a value that only ever failed the contract is picked less often.
4. Never twice: the set of (family, full config) of every attempt in the history, every
   member and every plan this agent made is excluded. When a member's neighbourhood is
   exhausted the search jumps; a family whose whole space is evaluated is skipped; when
   every family is exhausted `plan` returns None.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import itertools
import math
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from kdatui.kernels.kda import families

from .base import Agent, AgentContext, MemberView, Plan, TurnResult

PENDING = ("proposed", "evaluating")

# How often the search considers a tunable (before the credit it earns): the launch and
# tiling knobs move speed most; precision knobs mostly trade accuracy and often fail.
PRIOR = {"CHUNK": 1.0, "BV": 1.0, "num_warps": 1.0, "num_stages": 1.0, "prep_warps": 0.7, "PREP_LOOP": 1.0,
         "SEQ": 0.7, "INV": 0.6, "INV_DOT": 0.3, "STATE_DOT": 0.4, "SOLVE_DOT": 0.4, "WORKSPACE": 0.5,
         "prep_maxnreg": 0.7, "WALK_TMA": 0.5, "SEGMENT": 0.3}

# Short forms for member names: family + the settings that differ from the family default.
ABBREV = {"CHUNK": "c", "BV": "bv", "num_warps": "w", "num_stages": "s", "prep_warps": "pw", "PREP_LOOP": "pl",
          "INV": "inv", "INV_DOT": "invdot", "STATE_DOT": "state", "SOLVE_DOT": "solve", "WORKSPACE": "ws",
          "SEQ": "seq", "GROUP": "g", "X_FORM": "x", "GROUP_DOT": "gd", "SHARE": "sh", "prep_maxnreg": "pr",
          "WALK_TMA": "tma", "SEGMENT": "seg"}
MAX_NAME = 48


# --------------------------------------------------------------------------- family specs

# The family modules import torch and triton; the engine reads their PARAMS and CONFIG from
# the source instead (the same literals `families.params` / `default_config` return).

def _statement(tree: ast.Module, name: str) -> ast.Assign | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return node
    return None


@functools.lru_cache(maxsize=None)
def _spec(family: str) -> tuple[dict, dict, tuple]:
    text = families.source(family)
    tree = ast.parse(text)
    node = _statement(tree, "PARAMS")
    if node is None:
        raise ValueError(f"{families.FAMILIES[family]}: no PARAMS = {{...}} of the family's tunables")
    inert = _statement(tree, "INTERPRETER_INERT")
    return (ast.literal_eval(node.value), families.config_of(text),
            tuple(ast.literal_eval(inert.value)) if inert is not None else ())


def interpreter_inert(family: str) -> tuple[str, ...]:
    """The family's tunables that change nothing the Triton interpreter computes (launch
    options, GPU-only paths): a CPU search that changed them would evaluate the same kernel."""
    return _spec(family)[2]


def family_params(family: str) -> dict[str, tuple]:
    return {k: tuple(v) for k, v in _spec(family)[0].items()}


def default_config(family: str) -> dict:
    return dict(_spec(family)[1])


def render(family: str, config: dict) -> str:
    """`families.render` without importing the family: its source with CONFIG replaced by
    the full config (defaults filled in); a tunable or value outside PARAMS is an error."""
    allowed = family_params(family)
    full = default_config(family)
    for k, v in config.items():
        if k not in allowed:
            raise ValueError(f"{family}: unknown tunable {k!r}; tunables: {', '.join(allowed)}")
        if v not in allowed[k]:
            raise ValueError(f"{family}: {k} = {v!r} not allowed; allowed: {allowed[k]}")
        full[k] = v
    text = families.source(family)
    node = _statement(ast.parse(text), "CONFIG")
    lines = text.splitlines(keepends=True)
    start = sum(len(ln) for ln in lines[: node.lineno - 1]) + node.col_offset
    end = sum(len(ln) for ln in lines[: node.end_lineno - 1]) + node.end_col_offset
    return text[:start] + families.format_config(full) + text[end:]


# --------------------------------------------------------------------------- reasons

def _factor(a, b) -> str:
    r = max(a, b) / min(a, b)
    return {2: "double", 4: "quadruple", 8: "multiply by 8"}.get(r, f"multiply by {r:g}")


def _shrink(a, b) -> str:
    r = max(a, b) / min(a, b)
    return {2: "halve", 4: "quarter", 8: "divide by 8"}.get(r, f"divide by {r:g}")


# What a family's tunable does where its structure gives it another meaning, and where it
# does nothing (wide: kernels/kda/wide.py, figures in bench/RESULTS.md); added to a change's reason.
FAMILY_NOTES = {
    ("wide", "CHUNK"): "(wide: 64 halves the state steps, but its parallel stage was 30% slower on the H200)",
    ("wide", "BV"): "(wide: the sequential stage only; 'auto' picks 64/32/16 per shape)",
    ("wide", "num_warps"): "(wide: the sequential stage only; 8 suits BV 128; inert in the interpreter)",
    ("wide", "num_stages"): "(wide: the sequential stage's loads; inert in the interpreter)",
    ("wide", "prep_warps"): "(wide: the parallel stage, the family's bound; inert in the interpreter)",
    ("wide", "INV_DOT"): "(wide: tf32x3 was 2.2x slower on the H200; bf16x3 7% faster, but the fp64_correlated "
                         "probe failed at one shape; bf16x6 as accurate as ieee in the interpreter, not yet "
                         "timed; the interpreter runs ieee and tf32x3 in fp32)",
    ("wide", "prep_maxnreg"): "(wide: 128 fits four parallel-stage programs an SM, measured fastest; 96 spills; "
                              "inert in the interpreter)",
    ("wide", "WALK_TMA"): "(wide: with num_stages 3 the sequential stage went 0.46 -> 0.35 ms on the H200; "
                          "inert in the interpreter)",
    ("wide", "SEGMENT"): "(wide: no faster at the primary shape on the H200, 512 much slower; the interpreter "
                         "runs the segments in order)",
    ("wide", "SOLVE_DOT"): "(wide: bf16 passes every probe; the interpreter runs tf32 as plain fp32)",
    ("wide", "STATE_DOT"): "(wide: the interpreter runs tf32 as plain fp32)",
}


def _why(family: str, key: str, old, new) -> str:
    """Why changing one tunable could help, in the words of the kernel's design."""
    why = _why_change(family, key, old, new)
    note = FAMILY_NOTES.get((family, key))
    return f"{why} {note}" if note else why


def _why_change(family: str, key: str, old, new) -> str:
    numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (old, new))
    if key == "BV" and not numeric:  # 'auto' (wide): chosen per call from the shape
        return ("for a V-block chosen per shape from the head count and the SM count" if new == "auto"
                else f"for a fixed V-block of {new} columns at every shape")
    up = numeric and new > old
    if key == "CHUNK":
        return ("to " + _shrink(old, new) + " the sequential chunk steps of the recurrence, with more chunk-local "
                "work per step") if up else ("for cheaper chunk-local work (a smaller A, M and inverse) at the price "
                                            "of more sequential steps")
    if key == "BV":
        if up:
            return (f"to {_shrink(old, new)} the recurrence programs and reuse each chunk's terms across more V columns"
                    + (" (less repeated chunk-local work)" if family == "fused" else ""))
        return (f"to {_factor(old, new)} the recurrence programs"
                + (" (more parallelism over V; the chunk-local work is repeated per V-block)" if family == "fused"
                   else " (more parallelism over V in the sequential stage)"))
    if key == "num_warps":
        return ("for more warps per program to hide the latency of the state products" if up
                else "for fewer warps: more registers per thread for the state tile, less synchronisation")
    if key == "num_stages":
        return ("to pipeline deeper: the next chunk's loads overlap this chunk's products" if up
                else "for a shallower pipeline: less shared memory, higher occupancy, fewer spills")
    if key == "prep_warps":
        return ("for more warps in the parallel stage's A, inverse, W and U products" if up
                else "for fewer warps in the parallel stage: more of its programs resident per SM")
    if key == "prep_maxnreg":
        if not new:
            return "for no register cap in the parallel stage: no spills, fewer programs resident per SM"
        return ("for a looser register cap in the parallel stage: fewer spills, fewer programs per SM" if up and old
                else f"for a cap of {new} registers in the parallel stage: more of its programs resident per SM")
    if key == "SEGMENT" and new:
        return (f"to overlap the walk through each {new}-token segment with the parallel stage of the next "
                "(the walk on a high-priority stream)")
    if key == "PREP_LOOP":
        return ("for more chunks per parallel-stage program, the next chunk's loads in flight while one computes" if up
                else "for fewer chunks per parallel-stage program: more programs to fill the GPU")
    if key == "GROUP":
        return (f"to compute {new} chunks' local terms per step as one batch (more parallel work per step, "
                "staged through the program's scratch)" if up
                else f"for {new} chunk(s) of local work per step: fewer registers, less scratch traffic")
    categorical = {
        ("X_FORM", "direct"): "for X = (I+A)^-1 diag(beta) (V - K S): one inverse product per chunk instead of W and U",
        ("X_FORM", "wu"): "for X = U - W S from W and U: the inverse products leave the state chain",
        ("GROUP_DOT", "3d"): "for batched 3-D products over a group's chunks: no work on cross-chunk pairs",
        ("GROUP_DOT", "2d"): "for one 2-D tile per group, cross-chunk pairs masked: larger, simpler products",
        ("SHARE", "auto"): "for a head's V-block programs splitting its local terms where the grid leaves SMs idle",
        ("SHARE", "off"): "for every program computing all of its own local terms: no wait on sibling programs",
        ("INV", "subst"): "for forward substitution in the 16x16 inverse: fewer flops, but a serial loop",
        ("INV", "doubling"): "for the doubling inverse (I-A)(I+A^2)(I+A^4)(I+A^8): four products, no serial loop",
        ("INV_DOT", "tf32x3"): "for tf32x3 doubling products: faster than ieee fp32; the correlated probe tells",
        ("INV_DOT", "ieee"): "for ieee fp32 doubling products: slower, the most accurate inverse",
        ("INV_DOT", "bf16x3"): "for bf16x3 doubling products on the tensor cores: fewer shared-memory round trips "
                               "than fp32 on the FMA units, about 16 bits of mantissa",
        ("INV_DOT", "bf16x6"): "for bf16x6 doubling products on the tensor cores: three bf16 pieces and six products, "
                               "fp32's accuracy without the FMA units' shared-memory round trips",
        ("WALK_TMA", True): "for the sequential stage's tiles by TMA descriptors: asynchronous copies pipelined "
                            "without the threads' address work",
        ("WALK_TMA", False): "for the sequential stage's tiles by pointer loads (cp.async)",
        ("SEGMENT", 0): "for one parallel stage, then one walk: no stream hand-offs",
        ("STATE_DOT", "bf16"): "for bf16 operands in the state products: twice the tensor-core rate of tf32",
        ("STATE_DOT", "tf32"): "for tf32 operands in the state products: more precision where bf16 state drifts",
        ("SOLVE_DOT", "tf32"): "for tf32 A/M and inverse products: the fastest fp32-input products",
        ("SOLVE_DOT", "bf16"): "for bf16 A/M, inverse, W and U products: twice the tensor-core rate of tf32",
        ("SOLVE_DOT", "tf32x3"): "for tf32x3 A/M products: near-fp32 accuracy at about three times the tf32 cost",
        ("SOLVE_DOT", "ieee"): "for ieee fp32 A/M products: the most accurate, the slowest",
        ("WORKSPACE", "bf16"): "for a bf16 workspace between the stages: half the bytes of the intermediates",
        ("WORKSPACE", "fp32"): "for an fp32 workspace: exact intermediates at twice the traffic",
        ("SEQ", "vk"): "for the transposed state [BV,K]: every state product then has M = BV",
        ("SEQ", "kv"): "for the state as [K,BV]: the state products get another MMA shape",
    }
    return categorical.get((key, new), "to see how it moves the time")


def change_text(family: str, key: str, old, new) -> str:
    return f"{key} {old}->{new} {_why(family, key, old, new)}"


def diff(a: dict, b: dict) -> list[tuple[str, object, object]]:
    """(key, old, new) for every tunable that differs from a to b, in b's order."""
    return [(k, a.get(k), v) for k, v in b.items() if a.get(k) != v]


def config_name(family: str, config: dict) -> str:
    """Family + the settings that differ from the family default ('split-bv32-c32'),
    deterministic for a config; 'split-default' for the default. Too many differences for
    a readable name: the first few and a short hash of the whole config."""
    default = default_config(family)
    tokens = []
    for k in default:
        v = config.get(k, default[k])
        if v != default[k]:
            tokens.append(ABBREV.get(k, _alnum(k)) + _alnum(v))
    name = "-".join([family, *tokens]) if tokens else f"{family}-default"
    if len(name) > MAX_NAME:
        h = hashlib.sha1(repr(sorted(config.items())).encode()).hexdigest()[:6]
        head = family
        for t in tokens:
            if len(head) + len(t) + 1 > MAX_NAME - 8:
                break
            head += "-" + t
        name = f"{head}-h{h}"
    return name


def _alnum(v) -> str:
    return "".join(ch for ch in str(v).lower() if ch.isalnum())


def config_from_name(family: str, name: str) -> dict | None:
    """The config a name of `config_name` stands for (None when the name is not one, or is
    a hashed long one): what an attempt tried when its kernel.py is archived away."""
    if family not in families.FAMILIES or not name.startswith(family + "-"):
        return None
    full = default_config(family)
    rest = name[len(family) + 1:]
    if rest == "default":
        return full
    tokens = {}
    for k, values in family_params(family).items():
        for v in values:
            tokens[ABBREV.get(k, _alnum(k)) + _alnum(v)] = (k, v)
    for tok in rest.split("-"):
        if tok not in tokens:
            return None
        k, v = tokens[tok]
        full[k] = v
    return full


def idea_text(family: str, parent: str | None, reason: str, config: dict) -> str:
    """IDEA.md of a built-in attempt: family and parent lines, the one-line reason, the
    full config."""
    lines = [f"family: {family}", f"parent: {parent or 'base'}", reason, "", "config:"]
    lines += [f"  {k} = {v!r}" for k, v in config.items()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- what the history says

def _key(family: str, config: dict) -> tuple:
    return (family, tuple(sorted((k, repr(v)) for k, v in config.items())))


def _full(family: str, config: dict | None) -> dict | None:
    """A config with the family's defaults filled in; keys that are no tunable (profiling
    knobs, a renamed tunable) dropped. None when the family is unknown."""
    if config is None or family not in families.FAMILIES:
        return None
    full = default_config(family)
    for k, v in config.items():
        if k in full:
            full[k] = v
    return full


def _speeds(cells: dict, shapes: list[str]) -> dict[str, float]:
    out = {}
    for s in shapes:
        c = cells.get(s) or {}
        if c.get("verdict") == "PASS" and c.get("speedup"):
            out[s] = float(c["speedup"])
    return out


def _member_name(parent: str | None) -> str | None:
    """An attempt's parent as recorded ('base', 'frontier/<task>/<name>') -> a member name."""
    if not parent or parent == "base":
        return None
    return parent.rsplit("/", 1)[-1]


@dataclass
class FamilyStats:
    pulls: int = 0
    rewards: list[int] = field(default_factory=list)  # evaluated attempts, oldest first
    best: dict[str, float] = field(default_factory=dict)  # shape -> best passing speedup
    rendered: int = 0  # attempts with a config (the built-in kind)


@dataclass
class Knowledge:
    seen: set
    stats: dict[str, FamilyStats]
    credit: dict[tuple[str, str], float]  # (family, tunable) -> improvements it was part of
    failed: dict[tuple[str, str, str], int]  # (family, tunable, repr(value)) -> failed attempts
    passed: dict[tuple[str, str, str], int]


def learn(ctx: AgentContext, fams: list[str], planned: set) -> Knowledge:
    shapes = list(ctx.task.shapes)
    scored = [ctx.primary] if len(shapes) == 1 else shapes
    seen = set(planned)
    stats = {f: FamilyStats() for f in fams}
    configs: dict[str, dict] = {}
    for m in ctx.members:
        full = _full(m.family, m.config)
        if full is not None:
            seen.add(_key(m.family, full))
            configs[m.name] = full
    credit: dict = {}
    failed: dict = {}
    passed: dict = {}
    for a in ctx.history:
        # an archived attempt's kernel.py is gone: its name still says what it tried
        full = _full(a.family, a.config) if a.config is not None else config_from_name(a.family, a.name)
        if full is not None:
            seen.add(_key(a.family, full))
            configs.setdefault(a.name, full)
        st = stats.get(a.family)
        if st is None:
            continue
        st.pulls += 1
        st.rendered += full is not None
        if a.status in PENDING or a.verdict is None:
            continue
        ok = a.verdict == "passed"
        speeds = _speeds(a.cells, scored) if ok else {}
        improved = any(v > st.best.get(s, 0.0) for s, v in speeds.items())
        for s, v in speeds.items():
            st.best[s] = max(st.best.get(s, 0.0), v)
        st.rewards.append(int(improved))
        parent = configs.get(_member_name(a.parent) or "")
        if full is None or parent is None:
            continue
        for k, _, v in diff(parent, full):
            if improved:
                credit[(a.family, k)] = credit.get((a.family, k), 0.0) + 1.0
            book = passed if ok else failed
            book[(a.family, k, repr(v))] = book.get((a.family, k, repr(v)), 0) + 1
    return Knowledge(seen, stats, credit, failed, passed)


# --------------------------------------------------------------------------- the agent

class BuiltinAgent(Agent):
    """The default agent. `space` narrows the searched tunables (family -> {tunable: values});
    tunables left out stay at the family default."""

    name = "builtin"

    def __init__(self, *, space: dict[str, dict] | None = None, jump_p: float = 0.15, two_p: float = 0.25,
                 min_share: float = 0.5, window: int = 20):
        self.space = space
        self.jump_p = jump_p
        self.two_p = two_p
        self.min_share = min_share
        self.window = window
        self._planned: set = set()

    # ---------------------------------------------------------------- plan

    def families(self, ctx: AgentContext) -> list[str]:
        fams: list[str] = []
        for s in ctx.task.search.seeds:
            if s in families.FAMILIES:
                if s not in fams:
                    fams.append(s)
            elif not ("/" in s or s.endswith(".py")):  # a candidate path is the loop's business
                raise ValueError(f"task {ctx.task.name}: search.seeds: {s!r} is not a kernel family "
                                 f"(known: {', '.join(families.FAMILIES)}) nor a candidate path")
        return fams or list(families.FAMILIES)

    def params(self, family: str, device: str = "cuda") -> dict[str, tuple]:
        """The searched tunables; on the CPU (the interpreter) without the family's inert ones."""
        if self.space and family in self.space:
            space = {k: tuple(v) for k, v in self.space[family].items()}
        else:
            space = {k: tuple(v) for k, v in family_params(family).items()}
        if device == "cpu":
            space = {k: v for k, v in space.items() if k not in interpreter_inert(family)}
        return space

    def plan(self, ctx: AgentContext) -> Plan | None:
        fams = self.families(ctx)
        know = learn(ctx, fams, self._planned)
        for f in fams:
            seed, name, idea = self._seed(ctx, f)
            if know.stats[f].rendered == 0 and _key(f, seed) not in know.seen:
                return self._commit(Plan(family=f, name=name, parent=None, config=seed, idea=idea))
        for f in self._rank(ctx.rng, fams, know):
            plan = self._plan_family(ctx, f, know)
            if plan is not None:
                return self._commit(plan)
        return None

    @staticmethod
    def _seed(ctx: AgentContext, f: str) -> tuple[dict, str, str]:
        """A family's first attempt: its default, or the task's `search.seed_configs` over it."""
        default = default_config(f)
        over = (ctx.task.search.seed_configs or {}).get(f) or {}
        if not over:
            return default, f"{f}-default", f"{f}: the family's measured default configuration (seed)"
        try:
            render(f, over)  # a tunable or value outside PARAMS is an error here
        except ValueError as e:
            where = ctx.task.path or f"task {ctx.task.name}"
            raise ValueError(f"{where}: search.seed_configs.{f}: {e}") from None
        config = {**default, **over}
        changes = ", ".join(f"{k} {a}->{b}" for k, a, b in diff(default, config))
        return config, config_name(f, config), f"{f}: the task's seed configuration ({changes}) (seed)"

    def _commit(self, plan: Plan) -> Plan:
        self._planned.add(_key(plan.family, plan.config))
        return plan

    def _rank(self, rng: random.Random, fams: list[str], know: Knowledge) -> list[str]:
        """Families in the order to try: one short of its share first, else by a Thompson
        sample of its recent rate of self-improvement."""
        total = sum(know.stats[f].pulls for f in fams)
        floor = self.min_share / len(fams)
        samples = {}
        for f in fams:
            recent = know.stats[f].rewards[-self.window:]
            wins = sum(recent)
            samples[f] = rng.betavariate(1 + wins, 1 + len(recent) - wins)
        order = sorted(fams, key=lambda f: -samples[f])
        short = [f for f in fams if total >= len(fams) and know.stats[f].pulls < floor * total]
        short.sort(key=lambda f: know.stats[f].pulls / max(total, 1))
        return short + [f for f in order if f not in short]

    def _plan_family(self, ctx: AgentContext, f: str, know: Knowledge) -> Plan | None:
        rng = ctx.rng
        space = self.params(f, ctx.device)
        members = self._members(ctx, f)
        best = members[0] if members else None
        if members and rng.random() < self.jump_p:
            plan = self._jump(ctx, f, space, best, know)
            if plan is not None:
                return plan
        bases = self._bases(ctx, f, members)
        for i, base in enumerate(bases):
            plan = self._mutate(ctx, f, space, base, know, tries=40 if i == 0 else 0)
            if plan is not None:
                return plan
        return self._jump(ctx, f, space, best, know)

    def _members(self, ctx: AgentContext, f: str) -> list[MemberView]:
        """The family's members that are rendered configs, fastest on the primary shape first."""
        ms = [m for m in ctx.members if m.family == f and _full(f, m.config) is not None]
        return sorted(ms, key=lambda m: (-_speeds(m.cells, [ctx.primary]).get(ctx.primary, 0.0), m.name))

    def _bases(self, ctx: AgentContext, f: str, members: list[MemberView]) -> list[tuple[str | None, dict, str]]:
        """Members to mutate, the chosen one first: (parent, config, why chosen)."""
        if not members:
            return [(None, self._fallback_config(ctx, f), "")]
        rng = ctx.rng
        others = [s for s in ctx.task.shapes if s != ctx.primary]
        first = members[0]
        why = ""
        r = rng.random()
        if others and r < 0.25:
            shape = rng.choice(others)
            first = max(members, key=lambda m: (_speeds(m.cells, [shape]).get(shape, 0.0), m.name))
            why = f" (the family's fastest at {shape})"
        elif len(members) > 1 and r < 0.45:
            first = rng.choice(members[1:])
        rest = [m for m in members if m is not first]
        return [(m.name, _full(f, m.config), why if m is first else "") for m in [first, *rest]]

    def _fallback_config(self, ctx: AgentContext, f: str) -> dict:
        """No member to start from: the family's fastest passing attempt, else its default."""
        best, best_v = None, 0.0
        for a in ctx.history:
            if a.family == f and a.verdict == "passed":
                v = _speeds(a.cells, [ctx.primary]).get(ctx.primary, 0.0)
                full = _full(f, a.config)
                if full is not None and v > best_v:
                    best, best_v = full, v
        return best or default_config(f)

    def _tunable_weights(self, f: str, space: dict, know: Knowledge) -> dict[str, float]:
        return {k: PRIOR.get(k, 1.0) * (1.0 + know.credit.get((f, k), 0.0))
                for k, vals in space.items() if len(vals) > 1}

    def _value_weight(self, f: str, k: str, v, know: Knowledge) -> float:
        bad = know.failed.get((f, k, repr(v)), 0)
        return 0.25 if bad and not know.passed.get((f, k, repr(v))) else 1.0

    def _mutate(self, ctx, f, space, base, know, *, tries: int) -> Plan | None:
        parent, config, why = base
        rng = ctx.rng
        weights = self._tunable_weights(f, space, know)
        if not weights:
            return None
        keys = sorted(weights)
        for _ in range(tries):
            n = 2 if rng.random() < self.two_p and len(keys) > 1 else 1
            chosen: list[str] = []
            pool = list(keys)
            for _ in range(n):
                k = rng.choices(pool, weights=[weights[p] for p in pool])[0]
                chosen.append(k)
                pool.remove(k)
            cand = dict(config)
            for k in chosen:
                nbrs = neighbours(space[k], config[k])
                if not nbrs:
                    break
                cand[k] = rng.choices(nbrs, weights=[self._value_weight(f, k, v, know) for v in nbrs])[0]
            if cand != config and _key(f, cand) not in know.seen:
                return self._mutation_plan(f, parent, config, cand, why)
        # Systematically: every unseen single change, then every unseen pair.
        singles = [(k, v) for k in keys for v in neighbours(space[k], config[k])]
        options = [{**config, k: v} for k, v in singles]
        options = [c for c in options if _key(f, c) not in know.seen]
        if not options:
            pairs = [{**config, k1: v1, k2: v2} for (k1, v1), (k2, v2) in itertools.combinations(singles, 2)
                     if k1 != k2]
            options = [c for c in pairs if _key(f, c) not in know.seen]
        if not options:
            return None
        return self._mutation_plan(f, parent, config, rng.choice(options), why)

    def _mutation_plan(self, f, parent, base, cand, why) -> Plan:
        changes = "; ".join(change_text(f, k, a, b) for k, a, b in diff(base, cand))
        if parent is None:
            changes += " (from the default: the family has no member yet)"
        elif why:
            changes += f" (from {parent}{why})"
        return Plan(family=f, name=config_name(f, cand), parent=parent, config=cand, idea=f"{f}: {changes}")

    def _jump(self, ctx, f, space, best: MemberView | None, know: Knowledge) -> Plan | None:
        """A random region: about half the launch and tiling tunables re-drawn (fewer of the
        precision knobs); an exhaustive scan when random draws keep landing on evaluated configs."""
        rng = ctx.rng
        base = _full(f, best.config) if best else default_config(f)
        keys = [k for k, vals in space.items() if len(vals) > 1]
        for _ in range(60):
            cand = dict(base)
            for k in keys:  # precision knobs less often: they mostly trade accuracy
                if rng.random() < 0.5 * PRIOR.get(k, 1.0):
                    cand[k] = rng.choice(space[k])
            if len(diff(base, cand)) >= min(2, len(keys)) and _key(f, cand) not in know.seen:
                return self._jump_plan(f, best, base, cand)
        size = math.prod(len(space[k]) for k in keys) if keys else 1
        offset = rng.randrange(size)
        combos = itertools.product(*(space[k] for k in keys))
        for i, values in enumerate(itertools.chain(itertools.islice(combos, offset, None),
                                                   itertools.islice(itertools.product(*(space[k] for k in keys)),
                                                                    offset))):
            cand = {**base, **dict(zip(keys, values))}
            if _key(f, cand) not in know.seen:
                return self._jump_plan(f, best, base, cand)
        return None

    def _jump_plan(self, f, best: MemberView | None, base: dict, cand: dict) -> Plan:
        changes = ", ".join(f"{k} {a}->{b}" for k, a, b in diff(base, cand))
        origin = best.name if best else "the default"
        return Plan(family=f, name=config_name(f, cand), parent=best.name if best else None, config=cand,
                    idea=f"{f}: jump from {origin}: {changes} (re-drawn at random, to leave the "
                         f"neighbourhood of the family's best)")

    # ---------------------------------------------------------------- work

    def work(self, ctx: AgentContext, plan: Plan, worktree: Path, candidate_dir: Path) -> TurnResult:
        try:
            source = render(plan.family, plan.config or {})
        except (KeyError, ValueError) as e:
            return TurnResult(ok=False, reason=f"cannot render {plan.family} with {plan.config}: {e}")
        candidate_dir = Path(candidate_dir)
        if candidate_dir.exists():  # the parent's folder: this attempt replaces it whole
            for p in candidate_dir.iterdir():
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        candidate_dir.mkdir(parents=True, exist_ok=True)
        config = {**default_config(plan.family), **(plan.config or {})}
        (candidate_dir / "kernel.py").write_text(source)
        (candidate_dir / "IDEA.md").write_text(idea_text(plan.family, plan.parent, plan.idea, config))
        ctx.log(f"builtin: {plan.name}: {plan.idea}")
        return TurnResult(ok=True, family=plan.family, name=plan.name, idea=plan.idea)


def neighbours(values: tuple, current) -> list:
    """The allowed values next to `current`: one step up or down for an ordered numeric
    tunable, every other value for a categorical one (or for a value outside the list)."""
    if current not in values:
        return list(values)
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if not numeric:
        return [v for v in values if v != current]
    ordered = sorted(values)
    i = ordered.index(current)
    return [ordered[j] for j in (i - 1, i + 1) if 0 <= j < len(ordered)]
