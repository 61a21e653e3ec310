"""The judge: checks, references, timing and verdicts, out of the candidate's reach.

One judge process per GPU (or one on the CPU), started by the evaluator as
`python -P -m kdatui.engine.judge_main --device cpu|cuda` (engine/judge_main.py: the process,
its channel to the evaluator and the protocol; this module: the judging). It never imports
candidate code: it
reads a candidate's files as bytes, checks them statically, and hands them to an executor
(engine/executor.py: a sandboxed process running engine/runner.py) that imports them. The
judge makes every input (the holdout's from the salt, which only it reads), computes and
caches the fp64 references, copies inputs into an arena shared with the executor
(engine/arena.py), takes its own copy of each output once the executor says the call is
done, compares, times (engine/timing.py), audits timed outputs picked after the fact, and
writes the Evaluation. A crash, hang, CUDA error or OOM in the executor is an ERROR naming
it; the judge goes on, and a fresh executor serves the next candidate.

The protocol with the evaluator is in engine/judge_main.py.
"""

from __future__ import annotations

import os
import secrets
import statistics
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

import torch

from . import sandbox
from .arena import Arena, set_bytes
from .candidate import CandidateError, locate
from .checks import HARNESS_VERSION, CandidateFault, _judge, reference_outputs, run_checks
from .executor import Executor, ExecutorFault, ExecutorPool, read_candidate
from .probes import ProbeInputs, Tolerance, tolerance_for
from .records import Evaluation
from .timing import (TIMER_CPU, TIMER_GPU, WALL_SLACK_MS, WALL_SLACK_MS_CPU, batch_overhead, bound_by_wall, bytes_moved,
                     floor_check, paired_ratios, race_out, summarize)

HERE = Path(__file__).resolve().parent
FLA_BASELINE = HERE / "baseline_fla.py"
TORCH_BASELINE = HERE.parent / "kernels" / "kda" / "torch_chunked.py"
AUDITS_PER_TRIAL = 2  # timed calls of each side per trial whose outputs are checked against the baseline's
AUDIT_TOLERANCE = 2.0  # against the baseline's output (two approximations): twice the contract's
ARENA_SHARE = 0.25  # of free GPU memory for each side's timing arena
# Fresh input sets per batch are capped by bytes as well (the executor stages each set in its
# own memory, so the cap bounds memory, not speed).
ARENA_MAX_BYTES = 8 << 30


class CandidateGone(Exception):
    """The candidate left its executor unusable (CUDA error, memory exhausted, sys.exit):
    the evaluation ends here as ERROR with `reason`."""

    def __init__(self, reason: str, log: str = ""):
        super().__init__(reason)
        self.reason, self.log = reason, log


# --------------------------------------------------------------------------- references

class ReferenceCache:
    """fp64 reference outputs kept across evaluations, for `run_checks(references=...)`.

    A warm judge checks candidate after candidate on the same shapes, and every probe's
    reference is a pure function of the probe. run_checks keys its dict by probe name and
    shape only, so each dict here serves one scope: shape, the contract fields a probe
    depends on, and the holdout salt. Whole scopes leave, least recently used first, when
    the references held pass the byte budget (at B=1 T=8192 H=96 one scope is ~14 GB)."""

    def __init__(self, limit_bytes: int):
        self.limit_bytes = limit_bytes
        self._scopes: OrderedDict = OrderedDict()

    def scope(self, task, shape, salt: bytes | None) -> dict | None:
        if self.limit_bytes <= 0:
            return None
        c = task.contract
        # make_probe reads these fields of the contract and no others (keep in step with it).
        key = (tuple(shape.dims().values()), c.seed, c.lower_bound, c.rtol, c.atol_rms, c.rms,
               c.correlated_rtol, c.correlated_atol_rms, c.correlated_rms, salt)
        refs = self._scopes.pop(key, None)
        self._scopes[key] = refs if refs is not None else {}
        return self._scopes[key]

    def trim(self) -> None:
        """After an evaluation: drop the oldest scopes until within the budget (the newest
        stays, even alone over budget, since the next evaluation most likely needs it)."""
        while len(self._scopes) > 1 and self.bytes() > self.limit_bytes:
            self._scopes.popitem(last=False)

    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for refs in self._scopes.values()
                   for out in refs.values() for t in out if t is not None)


# --------------------------------------------------------------------------- a candidate in an executor

class CandidateSession:
    """One candidate (or the baseline) loaded in an executor, called on probes through an
    arena: the judge's side of `checks.CandidateCalls`."""

    def __init__(self, executor: Executor, device: str, files: dict[str, bytes] | None, module: str = "",
                 trusted_path: str = "", timeout_s: float = 600.0):
        self.ex, self.device = executor, device
        self.files, self.module, self.trusted_path = files, module, trusted_path
        self.where, self.step = "", ""
        self.loaded = False
        self.arena: Arena | None = None
        self.deadline = time.monotonic() + timeout_s
        self.timeout_s = timeout_s
        self._problem: str | None = None

    @property
    def digest(self) -> str:
        return self.ex.digest

    def restart_clock(self, timeout_s: float) -> None:
        self.deadline = time.monotonic() + timeout_s
        self.timeout_s = timeout_s

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            self.ex.kill()
            raise ExecutorFault(f"timed out after {self.timeout_s:g} s {self.where}", self.ex.log_tail(),
                                kind="timeout")
        return left

    def _request(self, msg: dict, where: str, fds=None) -> dict:
        """A request within what is left of the time limit; a timeout names the whole limit."""
        try:
            return self.ex.request(msg, self.remaining(), where, fds=fds)
        except ExecutorFault as e:
            if e.kind == "timeout":
                raise ExecutorFault(f"timed out after {self.timeout_s:g} s {where}", e.log, kind="timeout") from None
            raise

    def load_problem(self) -> str:
        """Import the candidate in its executor: "" if it loaded, else why not (an ERROR of
        the static step). An executor that dies or hangs here raises ExecutorFault."""
        if self._problem is not None:
            return self._problem
        self.where = "while importing the candidate"
        self.ex.ready(min(self.remaining(), 300.0))
        try:
            if self.trusted_path:
                ans = self.ex.load_trusted(self.trusted_path, self.remaining())
            else:
                ans = self.ex.load(self.files, self.module, self.remaining())
        except ExecutorFault as e:
            if e.kind == "timeout":
                raise ExecutorFault(f"timed out after {self.timeout_s:g} s {self.where}", e.log, kind="timeout") from None
            raise
        if ans.get("event") == "loaded":
            self.loaded, self._problem = True, ""
        else:
            self._problem = str(ans.get("reason") or ans)
            if ans.get("kind") in ("exit", "cuda", "oom"):
                raise CandidateGone(self._problem, self.ex.log_tail())
        return self._problem

    def prepare(self, dims: dict, sets: int = 1) -> None:
        if self.arena is not None and self.arena.dims == dims and self.arena.sets >= sets:
            return
        self.close_arena()
        self.arena = Arena(self.device, dims, sets)
        ans = self.ex.send_arena(self.arena, self.remaining())
        if ans.get("event") != "arena":
            raise ExecutorFault(f"the executor could not map the shared inputs: {ans.get('reason', ans)}",
                                self.ex.log_tail())

    def close_arena(self) -> None:
        if self.arena is not None:
            if self.ex.alive():
                try:
                    self.ex.request({"op": "close_arena"}, 30.0, "while unmapping the shared inputs")
                except ExecutorFault:
                    pass
            self.arena.close()
            self.arena = None

    def _answer(self, ans: dict, expect: str) -> dict:
        if ans.get("event") == expect:
            return ans
        if ans.get("event") != "fault":
            raise ExecutorFault(f"the executor answered {ans.get('event')!r} where {expect!r} was due {self.where}",
                                self.ex.log_tail())
        kind, reason = ans.get("kind", ""), str(ans.get("reason", ""))
        if kind in ("exit", "cuda", "oom"):
            log = self.ex.log_tail()
            self.ex.kill()
            label = self.step or "timing"
            if kind == "exit":
                raise CandidateGone(reason if reason.startswith("the candidate") else f"{label}: {reason}", log)
            if kind == "oom":
                raise CandidateGone(f"out of memory: {label}: {reason.removeprefix('out of memory: ')}", log)
            raise CandidateGone(f"{label}: {reason}", log)
        raise CandidateFault(reason)

    def call(self, p: ProbeInputs, output_final_state: bool = True, poison: bool = False, s: int = 0):
        self.prepare(_dims(p))
        self.arena.put(s, p)
        self.arena.poison_outputs(s)  # a copy-out that never happened shows as non-finite
        self.arena.settle()
        ans = self._request({"op": "call", "set": s, "init": p.initial_state is not None, "scale": p.scale,
                             "lower_bound": p.lower_bound, "ofs": output_final_state, "poison": poison}, self.where)
        ans = self._answer(ans, "done")
        return self.arena.take(s, final=bool(ans.get("final")))

    def changed_inputs(self, p: ProbeInputs, s: int = 0) -> str:
        got = self.arena.inputs[s]
        for name, t in p.tensors().items():
            if not torch.equal(got["init" if name == "initial_state" else name], t):
                return name
        return ""

    def request(self, msg: dict, expect: str) -> tuple[dict, float]:
        """A timing request; (answer, the judge's own wall time of it in ms)."""
        t0 = time.perf_counter()
        ans = self._request(msg, self.where)
        wall = (time.perf_counter() - t0) * 1e3
        return self._answer(ans, expect), wall

    def close(self) -> None:
        self.close_arena()


def _dims(p: ProbeInputs) -> dict:
    B, T, H, K = p.q.shape
    return {"B": B, "T": T, "H": H, "K": K, "V": p.v.shape[-1]}


_ONE_OFF: dict[str, ExecutorPool] = {}


def one_off_session(candidate: str, device: str, shape, timeout_s: float = 600.0):
    """A candidate in an executor of its own, for `run_checks` called without a judge
    (tests, scripts): closing it stops the executor. A spare executor is kept starting for
    the next call in this process (so a series of checks does not wait for each start)."""
    pool = _ONE_OFF.get(device)
    if pool is None:
        import atexit
        import shutil

        workdir = Path(tempfile.mkdtemp(prefix="kdatui-exec-"))
        pool = _ONE_OFF[device] = ExecutorPool(device, workdir, env=dict(os.environ), spare=True)
        atexit.register(lambda: (pool.close(), shutil.rmtree(workdir, ignore_errors=True)))
    pool.repos = _repos_near(candidate)
    files, module = read_candidate(candidate)
    s = CandidateSession(pool.take(), device, files, module, timeout_s=timeout_s)
    closer = s.close

    def close():
        try:
            closer()
        finally:
            pool.retire(s.ex)
    s.close = close
    return s


def _repos_near(*paths) -> list[Path]:
    """The repos whose `.frontier/` untrusted code must not see: around the candidate and
    around the current directory."""
    out = []
    for start in [*(Path(p).resolve() for p in paths), Path.cwd().resolve()]:
        for d in (start, *start.parents):
            dotgit = d / ".git"
            if dotgit.is_file():  # a linked worktree (an attempt's): its repo is where its gitdir points
                try:
                    gitdir = Path(dotgit.read_text().split("gitdir:", 1)[1].strip())
                    d = (d / gitdir).resolve().parents[2]
                except (OSError, IndexError):
                    continue
            elif not ((d / ".frontier").is_dir() or dotgit.is_dir()):
                continue
            if d not in out:
                out.append(d)
            break
    return out


# --------------------------------------------------------------------------- baselines

def baseline_source(requested: str, device: str, task_dir: Path | None = None) -> tuple[str, str, str]:
    """(name, file to load in the baseline's executor, note). `fla` when asked for, on a
    GPU, where fla-core imports; otherwise the named kernel file; else the torch candidate."""
    from .baselines import fla_available

    if requested == "fla" and device.startswith("cuda") and fla_available():
        return "fla", str(FLA_BASELINE), "fla-core chunk_kda (Triton, FLA_FLASH_KDA=0)"
    if requested not in ("fla", "torch"):
        p = Path(requested)
        if not p.is_absolute() and task_dir is not None and not p.exists():
            p = task_dir / p
        return requested, str(locate(p).kernel.resolve()), "project kernel"
    note = "torch candidate (fla-core not importable)" if requested == "fla" else "torch candidate"
    if requested == "fla" and not device.startswith("cuda"):
        note = "torch candidate (CPU run)"
    return "torch", str(TORCH_BASELINE), note


# --------------------------------------------------------------------------- timing through two executors

def measure_bandwidth() -> float | None:
    """Device-to-device copy bandwidth in bytes/s (bytes read + written), for the floor."""
    if not torch.cuda.is_available():
        return None
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        y.copy_(x)
    e.record()
    e.synchronize()
    bw = 10 * 2 * x.numel() / (s.elapsed_time(e) / 1e3)
    del x, y
    torch.cuda.empty_cache()
    return bw


def _timing_sets(device: str, dims: dict, repeats: int) -> int:
    """Fresh input sets per batch (= timed calls per batch)."""
    forced = os.environ.get("KDATUI_TIMING_SETS")  # a diagnostic knob
    if forced:
        return max(1, min(repeats, int(forced)))
    if device != "cuda":
        return repeats
    free, _ = torch.cuda.mem_get_info()
    per = set_bytes(dims)
    return max(1, min(repeats, int(min(ARENA_SHARE * free, ARENA_MAX_BYTES) // max(per, 1))))


def time_pair(base: CandidateSession, cand: CandidateSession, task, shape, device: str, *,
              progress=None, floor_ms: float | None = None, audit=None, spent: dict | None = None,
              race_below: float | None = None) -> tuple:
    """Paired timing of the candidate against the baseline, each in its own executor, on
    fresh inputs for every timed call. Returns (PairedTiming, audit verdict, audit reason).
    `spent` (a dict) gets the judge's seconds by part: warmup, fill, batches, audit.
    `race_below`: the least speedup that could be admitted; when even the best trial so far
    is below it, the trials left are not run (the timing says so in `raced`)."""
    spent = {} if spent is None else spent
    for k in ("warmup", "fill", "batches", "audit"):
        spent[k] = 0.0
    clock = [time.perf_counter()]

    def lap(part: str) -> None:
        now = time.perf_counter()
        spent[part] += now - clock[0]
        clock[0] = now

    b = task.bench
    dims = shape.dims()
    n = _timing_sets(device, dims, b.repeats)
    chunks = -(-b.repeats // n)
    for sess in (base, cand):
        sess.prepare(dims, n + 1)  # set 0: the lead-in call of every batch (untimed); 1..n: timed, fresh
    seed0 = secrets.randbits(62)  # timing inputs nobody can draw before the judge does
    common = {"init": True, "scale": dims["K"] ** -0.5, "lower_bound": task.contract.lower_bound, "ofs": True}

    def fill(sess: CandidateSession, i: int, tag: int) -> None:
        fill_timing_set(sess.arena.inputs[i], seed0 + tag, device)

    # warm-up, then the host cost of one call with the GPU idle, on a set of its own
    host = []
    for sess in (base, cand):
        sess.where = "during the timing warm-up"
        fill(sess, 0, -1)
        sess.arena.settle()
        sess.request({"op": "warmup", "set": 0, "n": max(b.warmup, 1), **common}, "warm")
        ans, _ = sess.request({"op": "host_cost", "set": 0, "n": 3, **common}, "host")
        host.append(statistics.median(ans["ms"]))
    lap("warmup")
    tol = tolerance_for("random", task.contract)
    audit_tol = Tolerance(tol.rtol * AUDIT_TOLERANCE, tol.atol_rms * AUDIT_TOLERANCE, tol.rms * AUDIT_TOLERANCE)
    per_trial = {"base": [], "cand": []}
    flags: list[str] = []
    suspect = ""
    overheads: list[float] = []
    audited = 0
    failed = ""
    last: tuple[int, list[int]] | None = None
    raced = ""
    for trial in range(b.trials):
        if progress:
            progress(trial, b.trials, f"trial {trial + 1}/{b.trials}")
        calls = {"base": [], "cand": []}
        to_audit = [AUDITS_PER_TRIAL, b.repeats]  # audits left to draw in this trial, calls left to draw them from
        for chunk in range(chunks):
            k = min(n, b.repeats - chunk * n)
            tags = [(trial * chunks + chunk) * n + i for i in range(k)]
            order = ("base", "cand") if trial % 2 == 0 else ("cand", "base")
            for side in order:
                sess = base if side == "base" else cand
                sess.where = f"during timing trial {trial + 1}/{b.trials}"
                for i, tag in enumerate(tags):  # drawn now, for this side: the other side's copy stays its own
                    fill(sess, i + 1, tag)
                sess.arena.settle()  # the inputs are written before the executor reads them, and nothing of ours runs beside its batch
                lap("fill")
                # the lead-in (set 0, seen in the warm-up) keeps the GPU busy when the first timed call is
                # enqueued, so no call's figure holds host launch time: every timed call follows another
                ans, wall = sess.request({"op": "batch", "sets": list(range(1, k + 1)), "lead": 0,
                                          "flush": b.flush_l2, **common}, "timed")
                ms = [float(x) for x in ans["ms"]]
                if len(ms) != k or not all(x == x and x >= 0 for x in ms):
                    raise ExecutorFault(f"the executor reported {len(ms)} times for {k} calls {sess.where}")
                if side == "base":
                    overheads.append(batch_overhead(ms, wall, lead=device == "cuda"))
                    calls["base"] += ms
                else:
                    if ans.get("tamper"):
                        suspect = suspect or "the timer was tampered with: " + "; ".join(ans["tamper"])
                    cand_batch = (ms, wall)
                lap("batches")
            ms_c, wall_c = cand_batch
            credited, flag = bound_by_wall(ms_c, wall_c, min(overheads), lead=device == "cuda",
                                          slack_ms=WALL_SLACK_MS if device == "cuda" else WALL_SLACK_MS_CPU)
            if flag:
                flags.append(f"trial {trial + 1}: {flag}")
                ms_c = [max(x, credited) for x in ms_c]
            calls["cand"] += ms_c
            # audit: outputs of calls picked now, after the fact, against the baseline's on the same inputs
            for i in _select(k, to_audit):
                oc, sc = cand.arena.take(i + 1)
                ob, sb = base.arena.take(i + 1)
                c = _judge(oc, sc, (ob.double(), sb.double()), audit_tol)
                audited += 1
                if not c.ok:
                    failed = (f"post-timing: {c.reason} (timed call {chunk * n + i + 1} of trial {trial + 1}, "
                              f"against the baseline's output on the same fresh inputs)")
                    break
            lap("audit")
            if failed:
                break
            last = (secrets.randbelow(k), tags)
        per_trial["base"].append(statistics.median(calls["base"]))
        per_trial["cand"].append(statistics.median(calls["cand"]))
        if failed:
            break  # the figures so far stay in the record; a wrong kernel is not timed further
        raced = race_out(paired_ratios(per_trial["base"], per_trial["cand"]), race_below, b.trials - trial - 1)
        if raced:
            break
    if progress:
        progress(b.trials, b.trials, "timed")
    timing = summarize(per_trial["base"], per_trial["cand"], repeats=b.repeats,
                       timer=TIMER_GPU if device == "cuda" else TIMER_CPU, flush_l2=b.flush_l2 and device == "cuda",
                       host=(host[0], host[1]), flags=flags, floor_ms=floor_ms, audited=audited, sets_per_batch=n)
    suspect = suspect or floor_check(timing.candidate.median_ms, floor_ms)
    timing.suspect = suspect
    timing.raced = raced
    if failed:
        return timing, "FAIL", failed
    # one timed call, picked now, against the fp64 reference of its inputs (drawn again from its
    # seed) at one (batch, head) drawn now: a head is an independent recurrence, and one costs
    # 1/(B*H) of the whole reference
    i, tags = last
    p = timing_probe(shape, task.contract, seed0 + tags[i], device)
    bi, hi = secrets.randbelow(shape.B), secrets.randbelow(shape.H)
    oc, sc = cand.arena.take(i + 1)
    c = _judge(oc[bi:bi + 1, :, hi:hi + 1], sc[bi:bi + 1, hi:hi + 1], reference_outputs(p.cut(bi, hi)), p.tolerance)
    timing.audited += 1
    lap("audit")
    if not c.ok:
        return timing, "FAIL", (f"post-timing: {c.reason} (timed call {i + 1} of the last trial, batch {bi} head {hi}, "
                                f"against the reference)")
    return timing, "PASS", ""


def fill_timing_set(dst: dict, seed: int, device: str) -> None:
    """Draw one timing input set in place (the arena's slots: no copy): the "random" probe's
    distributions (KDA.md §5), q, k, v, g, beta drawn directly in bf16."""
    g = torch.Generator(device=device).manual_seed(seed)
    for name in ("q", "k", "v", "g", "beta"):
        t = dst[name]
        torch.randn(t.shape, generator=g, dtype=t.dtype, device=t.device, out=t)
    H = dst["A_log"].shape[0]
    dst["A_log"].copy_(torch.log(1 + 15 * torch.rand(H, generator=g, device=device)))
    dst["dt_bias"].copy_(0.1 * torch.randn(dst["dt_bias"].shape, generator=g, device=device))
    torch.randn(dst["init"].shape, generator=g, dtype=torch.float32, device=device, out=dst["init"])


def timing_probe(shape, contract, seed: int, device: str) -> ProbeInputs:
    """A timing input set drawn again from its seed, as the judge's own tensors (the audit)."""
    B, T, H, K, V = shape.B, shape.T, shape.H, shape.K, shape.V
    bf, f32 = torch.bfloat16, torch.float32
    d = {"q": torch.empty(B, T, H, K, dtype=bf, device=device), "k": torch.empty(B, T, H, K, dtype=bf, device=device),
         "v": torch.empty(B, T, H, V, dtype=bf, device=device), "g": torch.empty(B, T, H, K, dtype=bf, device=device),
         "beta": torch.empty(B, T, H, dtype=bf, device=device), "A_log": torch.empty(H, dtype=f32, device=device),
         "dt_bias": torch.empty(H, K, dtype=f32, device=device), "init": torch.empty(B, H, V, K, dtype=f32, device=device)}
    fill_timing_set(d, seed, device)
    return ProbeInputs(name="timing", q=d["q"], k=d["k"], v=d["v"], g=d["g"], beta=d["beta"], A_log=d["A_log"],
                       dt_bias=d["dt_bias"], initial_state=d["init"], scale=K ** -0.5, lower_bound=contract.lower_bound,
                       tolerance=tolerance_for("random", contract))


def _select(k: int, left: list[int]) -> list[int]:
    """Which of a batch's k calls to audit, drawn after the batch with the OS's randomness so
    that `left` = [audits, calls] left in the trial ends as a uniform draw of that many of its
    calls (selection sampling: each call is taken with probability audits left / calls left)."""
    out = []
    for i in range(k):
        if left[0] > 0 and secrets.randbelow(max(left[1], 1)) < left[0]:
            out.append(i)
            left[0] -= 1
        left[1] -= 1
    return out


# --------------------------------------------------------------------------- the judge

class _Progress:
    """The check and timing callbacks as progress events: every event carries done/total over
    the whole evaluation (check steps + timing trials), so a client draws one bar per shape."""

    def __init__(self, send, job_id, shape: str, check_steps: int, trials: int):
        self.send_, self.id, self.shape = send, job_id, shape
        self.check_steps, self.trials = check_steps, trials
        self.total = check_steps + trials
        self.t0 = time.perf_counter()

    def _send(self, **kw) -> None:
        self.send_({"event": "progress", "id": self.id, "shape": self.shape, "total": self.total,
                    "elapsed_s": round(time.perf_counter() - self.t0, 3), **kw})

    def check(self, i: int, n: int, label: str) -> None:
        self._send(phase="check", step=i, steps=n, label=label, done=min(i, n))

    def timing(self, j: int, m: int, label: str) -> None:
        self._send(phase="timing", step=j, steps=m, label=label, done=self.check_steps + min(j, m))

    def post_timing(self) -> None:
        self._send(phase="post_timing", step=0, steps=1, label="post-timing check", done=self.total)


class Judge:
    def __init__(self, device: str, *, workdir: Path, reference_cache: int, memory_limit: int = 0,
                 env: dict | None = None, spare: bool = True, pool: ExecutorPool | None = None):
        self.device = device
        self.device_name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
        self.pool = pool or ExecutorPool(device, workdir, env=env if env is not None else dict(os.environ),
                                         memory_limit=memory_limit, spare=spare)
        self.references = ReferenceCache(reference_cache)
        self.current: CandidateSession | None = None
        self.baseline: CandidateSession | None = None
        self._bandwidth: float | None = None
        self._bandwidth_done = False

    @property
    def sandbox(self) -> sandbox.SandboxInfo:
        return self.pool.info

    def floor_ms(self, dims: dict) -> float | None:
        if self.device != "cuda":
            return None
        if not self._bandwidth_done:
            self._bandwidth, self._bandwidth_done = measure_bandwidth(), True
        return bytes_moved(dims) / self._bandwidth * 1e3 if self._bandwidth else None

    def _session(self, candidate: str, timeout_s: float) -> CandidateSession:
        files, module = read_candidate(candidate)
        from .executor import candidate_digest

        digest = candidate_digest(files)
        cur = self.current
        if cur is not None and cur.digest == digest and cur.loaded and cur.ex.alive():
            cur.restart_clock(timeout_s)
            return cur
        self._retire_current()
        self.pool.repos = _repos_near(candidate)
        self.current = CandidateSession(self.pool.take(), self.device, files, module, timeout_s=timeout_s)
        return self.current

    def _retire_current(self) -> None:
        if self.current is not None:
            self.current.close()
            self.pool.retire(self.current.ex)
            self.current = None

    def _baseline_session(self, task, timeout_s: float) -> tuple[CandidateSession, str]:
        name, path, _note = baseline_source(task.bench.baseline, self.device,
                                            Path(task.path).parent if task.path else None)
        if self.baseline is None or self.baseline.trusted_path != path or not self.baseline.ex.alive():
            if self.baseline is not None:
                self.baseline.close()
            ex = self.pool.baseline_executor(path, timeout_s)
            self.baseline = CandidateSession(ex, self.device, None, trusted_path=path, timeout_s=timeout_s)
            self.baseline.loaded = True
            self.baseline._problem = ""
        self.baseline.restart_clock(timeout_s)
        return self.baseline, name

    def evaluate(self, task, shape, candidate: str, *, timing: bool = True, salt: bytes | None = None,
                 progress: _Progress | None = None, timeout_s: float | None = None,
                 race_below: float | None = None) -> Evaluation:
        """Checks, then (only if they pass, and if asked) paired timing and its audit.
        Never raises for a candidate's fault: the record says what happened. `race_below`:
        see time_pair; a timing stopped so is recorded RACED with its partial figure."""
        t_start = time.perf_counter()
        timeout = timeout_s or task.bench.timeout_s
        ev = Evaluation(candidate=candidate, task=task.name, shape=shape.name, dims=shape.dims(), verdict="ERROR",
                        device=self.device_name, harness=HARNESS_VERSION)
        ev.seconds = {"checks": 0.0, "timing": 0.0, "total": 0.0}
        sess = None
        try:
            try:
                locate(candidate)
            except CandidateError:
                sess = None  # the static step says so
            else:
                sess = self._session(candidate, timeout)
            report = run_checks(task, shape, candidate, device=self.device, progress=progress.check if progress else None,
                                fail_fast=True, salt=salt, references=self.references.scope(task, shape, salt),
                                calls=sess if sess is not None else _NoExecutor(candidate))
            ev.checks, ev.verdict = report, report.verdict
            ev.seconds["checks"] = time.perf_counter() - t_start
            if not report.passed:
                bad = report.first_problem()
                ev.reason = f"{bad.probe}: {bad.reason}" if bad else "no check ran"
                return ev
            if not timing:
                return ev
            t_timing = time.perf_counter()
            try:
                base, name = self._baseline_session(task, timeout)
            except Exception as e:  # a broken baseline is not the candidate's fault, but no timing is possible
                ev.verdict, ev.reason = "ERROR", f"baseline {task.bench.baseline}: {type(e).__name__}: {_first_line(e)}"
                return ev
            ev.baseline = task.bench.baseline if name not in ("fla", "torch") else name
            sess.where = "during timing"
            sess.step = "timing"
            spent: dict = {}
            pt, audit, reason = time_pair(base, sess, task, shape, self.device,
                                          progress=progress.timing if progress else None,
                                          floor_ms=self.floor_ms(shape.dims()), spent=spent,
                                          race_below=race_below)
            ev.seconds.update({f"timing.{k}": v for k, v in spent.items()})
            if progress:
                progress.post_timing()
            ev.post_timing = audit
            ev.seconds["timing"] = time.perf_counter() - t_timing
            if audit != "PASS":
                # a timed call answered wrong: the figures measured calls that did not do the work,
                # so none of them stands in the record (the reason says what they were)
                ev.verdict = "FAIL"
                ev.reason = (f"{reason}; the timing before it does not stand ({pt.candidate.median_ms:.4g} ms a call "
                             f"against the baseline's {pt.baseline.median_ms:.4g} ms)")
            else:
                ev.timing = pt
                if pt.suspect:
                    ev.verdict, ev.reason = "SUSPECT", f"timing: {pt.suspect}"
                elif pt.raced:
                    ev.verdict, ev.reason = "RACED", f"timing: {pt.raced}"
                else:
                    ev.verdict, ev.reason = "PASS", ""
            return ev
        except CandidateGone as e:
            ev.verdict, ev.reason, ev.log = "ERROR", e.reason, e.log
            self._retire_current()
            return ev
        except ExecutorFault as e:
            ev.verdict, ev.reason, ev.log = "ERROR", e.reason, e.log
            self._retire_current()
            return ev
        finally:
            ev.seconds["total"] = time.perf_counter() - t_start
            if sess is not None:
                sess.step = sess.where = ""

    def after(self) -> None:
        """Between evaluations: trim the references, give GPU memory back (a full collection
        first, so tensors held in cycles go too; on the CPU it only cost 0.1 s a shape)."""
        self.references.trim()
        if self.device == "cuda":
            import gc

            gc.collect()
            torch.cuda.empty_cache()

    def close(self) -> None:
        self._retire_current()
        if self.baseline is not None:
            self.baseline.close()
        self.pool.close()


class _NoExecutor:
    """Stands in where no executor could be had (a candidate that cannot be located): the
    static step reports it, so nothing here is ever called."""

    where = step = ""
    loaded = True

    def __init__(self, candidate):
        self.candidate = candidate

    def load_problem(self) -> str:
        return f"{self.candidate}: no such candidate"


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0][:200] if s else ""
