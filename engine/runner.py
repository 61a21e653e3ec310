"""The executor's runner: the only kdatui code that shares a process with a candidate.

The judge (kdatui.engine.judge) starts this file as a script, under the sandbox
(engine/sandbox.py), with `python -P runner.py --device cpu|cuda --channel FD`. It imports
the standard library and torch, nothing else of kdatui: no checks, no references, no
probe generators, no salt, no store. It loads one candidate, calls its `kda_forward` on
inputs the judge put in a shared arena, copies the outputs into the arena, and times
calls. Everything here is the candidate's to bend (it shares the process), so nothing this
file reports is taken on trust: the judge compares outputs it copies itself, and bounds
every time by what it measures from its own side.

Channel: one end of a Unix socket pair (FD), JSON lines both ways; shared-memory file
descriptors of CPU arenas arrive with SCM_RIGHTS on the same socket.

  judge -> runner                                   runner -> judge
  {"op": "load", "path", "folder"}                  {"event": "loaded"} | fault
  {"op": "arena", "kind": "cpu"|"cuda", "size",     {"event": "arena"}
   "handle" (cuda IPC, hex), "slots": [...]}         (a cpu arena's fd follows the line)
  {"op": "call", "set", "init", "scale",            {"event": "done", "final": bool} | fault
   "lower_bound", "ofs", "poison"}
  {"op": "warmup", "set", "n", ...}                 {"event": "warm"}
  {"op": "batch", "sets", "lead", "init", "scale",  {"event": "timed", "ms": [...], "wall_ms",
   "lower_bound", "flush"}                            "tamper": [...]} | fault
  {"op": "host_cost", "set", "n", ...}              {"event": "host", "ms": [...]}
  {"op": "exit"}
  fault: {"event": "fault", "kind": "raised"|"structure"|"oom"|"cuda"|"exit", "reason"}

On a GPU the candidate is never handed the arena itself: each call's input set is copied
(enqueued on the caller's stream, outside the events) into a staging set this process
allocated, and the candidate reads that. Memory mapped from another process with CUDA IPC
is slow to read in some access patterns: on the H200 split's parallel stage took 12.5 ms a
call on inputs in the IPC-mapped arena and 1.6 ms on the same inputs in its own memory
(bench/timing_diag.py). After a check's call the staging set is copied back, so the judge
still sees what the candidate did to its inputs.

Before the candidate is imported, the runner takes its own references to the clock, the
CUDA event functions and the few tensor methods it calls, and uses only those; it checks
before and after each timed batch that the public names still point at the originals and
reports any that do not (`tamper`): a candidate that replaces its timer is flagged, and
one that also finds the runner's references is caught by the judge's wall clock instead.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import mmap
import os
import re
import signal
import socket
import statistics
import sys
import time
import traceback

_perf = time.perf_counter  # taken before any candidate code runs
L2_FLUSH_BYTES = 256 << 20  # written before each timed GPU call (> the 50-60 MB L2 of an H100/H200)
_OOM = re.compile(r"MemoryError|OutOfMemoryError|can't allocate memory|out of memory", re.IGNORECASE)
_CUDA_FAULT = re.compile(r"CUDA error|illegal memory access|AcceleratorError|device-side assert|"
                         r"unspecified launch failure", re.IGNORECASE)


class Fault(Exception):
    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind, self.reason = kind, reason


class Channel:
    def __init__(self, fd: int):
        self.sock = socket.socket(fileno=fd)
        self._buf = b""

    def send(self, msg: dict) -> None:
        self.sock.sendall((json.dumps(msg, default=str) + "\n").encode())

    def recv(self) -> tuple[dict | None, list[int]]:
        fds: list[int] = []
        while b"\n" not in self._buf:
            data, got, _flags, _addr = socket.recv_fds(self.sock, 1 << 16, 4)
            fds += got
            if not data:
                return None, fds
            self._buf += data
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line), fds


# --------------------------------------------------------------------------- CUDA IPC

class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


class _DeviceBuffer:
    """A device pointer as an object torch.as_tensor accepts (__cuda_array_interface__)."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}


def _open_ipc(handle_hex: str, nbytes: int):
    lib = ctypes.CDLL("libcuda.so.1")
    h = _IpcHandle()
    ctypes.memmove(ctypes.addressof(h), bytes.fromhex(handle_hex), 64)
    ptr = ctypes.c_uint64()
    fn = lib.cuIpcOpenMemHandle_v2
    fn.argtypes = [ctypes.POINTER(ctypes.c_uint64), _IpcHandle, ctypes.c_uint]
    rc = fn(ctypes.byref(ptr), h, 1)  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
    if rc != 0:
        raise RuntimeError(f"cuIpcOpenMemHandle failed (CUresult {rc})")
    close = lib.cuIpcCloseMemHandle
    close.argtypes = [ctypes.c_uint64]
    return ptr.value, (lambda: close(ptr.value))


# --------------------------------------------------------------------------- the runner

class Runner:
    def __init__(self, device: str, channel: Channel):
        import torch

        self.torch = torch
        self.device = device
        self.ch = channel
        self.fn = None
        self.arena = None  # (base uint8 tensor, views {set: {name: tensor}}, outs, closer)
        self._base_ptr = 0
        self.stage: dict | None = None  # one input set in this process's memory (module docstring)
        self.stage_inputs = device == "cuda"  # a CPU arena is plain shared memory: read in place
        self._stage_ptrs: frozenset = frozenset()
        T = torch.Tensor
        # The runner's own references (see the module docstring): taken before the candidate loads.
        self._tensor_type = T
        self._copy = T.copy_
        self._empty_like = torch.empty_like
        self._zero = T.zero_
        self._fill = T.fill_
        self._data_ptr = T.data_ptr
        self._guards = [(time, "perf_counter", time.perf_counter), (torch, "empty", torch.empty),
                        (torch.Tensor, "copy_", T.copy_)]
        if device == "cuda":
            torch.cuda.init()
            torch.zeros(1, device="cuda")
            self._sync = torch.cuda.synchronize
            self._Event = torch.cuda.Event
            self._record = torch.cuda.Event.record
            self._elapsed = torch.cuda.Event.elapsed_time
            self._guards += [(torch.cuda, "synchronize", torch.cuda.synchronize), (torch.cuda, "Event", torch.cuda.Event),
                             (torch.cuda.Event, "record", torch.cuda.Event.record),
                             (torch.cuda.Event, "elapsed_time", torch.cuda.Event.elapsed_time),
                             (torch.cuda, "current_stream", torch.cuda.current_stream)]
            self._flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        else:
            self._sync = lambda: None
            self._flush = None
        self._codes = {id(f): getattr(f, "__code__", None) for _, _, f in self._guards}
        self._own_clock = _perf  # and the runner's own reference, which a candidate could swap through its globals

    # -- the candidate

    def load(self, path: str, folder: str) -> None:
        if folder and folder not in sys.path:
            sys.path.insert(0, folder)
        spec = importlib.util.spec_from_file_location("kdatui_candidate", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["kdatui_candidate"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException as e:  # noqa: BLE001 - an import that raises anything is the candidate's fault
            raise Fault("import", f"import failed: {type(e).__name__}: {_first_line(e)}") from e
        fn = getattr(module, "kda_forward", None)
        if not callable(fn):
            raise Fault("import", "defines no callable kda_forward")
        self.fn = fn

    # -- the arena

    def open_arena(self, msg: dict, fds: list[int]) -> None:
        torch = self.torch
        self.close_arena()
        size = int(msg["size"])
        if msg["kind"] == "cuda":
            ptr, closer = _open_ipc(msg["handle"], size)
            base = torch.as_tensor(_DeviceBuffer(ptr, size), device="cuda")
        else:
            if not fds:
                raise Fault("structure", "arena: no file descriptor arrived")
            mm = mmap.mmap(fds[0], size)
            os.close(fds[0])
            base = torch.frombuffer(mm, dtype=torch.uint8)
            closer = mm.close
        views: dict = {}
        outs: dict = {}
        for s in msg["slots"]:
            dt = getattr(torch, s["dtype"])
            n = 1
            for d in s["shape"]:
                n *= d
            t = base[s["offset"]: s["offset"] + n * _itemsize(torch, dt)].view(dt).view(*s["shape"])
            (outs if s["role"] == "out" else views).setdefault(s["set"], {})[s["name"]] = t
        self.arena = (base, views, outs, closer)
        self._base_ptr = base.untyped_storage().data_ptr()
        if self.stage_inputs and views:
            self.stage = {name: self._empty_like(t) for name, t in views[min(views)].items()}
            self._stage_ptrs = frozenset(t.untyped_storage().data_ptr() for t in self.stage.values())

    def close_arena(self) -> None:
        if self.arena is not None:
            base, _v, _o, closer = self.arena
            self.arena = None
            self.stage, self._stage_ptrs = None, frozenset()
            self._sync()
            del base
            import gc

            if self.device == "cuda":
                gc.collect()  # tensors left in cycles over the mapping go before it does
            try:
                closer()
            except BufferError:  # a view still alive (in a cycle): collect, then close
                gc.collect()
                try:
                    closer()
                except Exception:  # noqa: BLE001
                    pass
            except Exception:  # noqa: BLE001
                pass

    def _stage_in(self, s: int) -> None:
        """Set `s` of the arena into the staging set (stream-ordered; nothing if no staging)."""
        if self.stage is not None:
            for name, t in self.arena[1][s].items():
                self._copy(self.stage[name], t)

    def _stage_out(self, s: int) -> None:
        """The staging set back into set `s` of the arena: the judge sees in-place changes."""
        if self.stage is not None:
            for name, t in self.arena[1][s].items():
                self._copy(t, self.stage[name])

    def _args(self, msg: dict, s: int):
        """The call's arguments: the staging set on a GPU (after `_stage_in(s)`), else set `s`."""
        v = self.stage if self.stage is not None else self.arena[1][s]
        args = (v["q"], v["k"], v["v"], v["g"], v["beta"], v["A_log"], v["dt_bias"])
        kw = dict(scale=msg["scale"], lower_bound=msg["lower_bound"],
                  initial_state=v["init"] if msg.get("init") else None, output_final_state=msg.get("ofs", True))
        return args, kw

    # -- calls

    def _invoke(self, args, kw):
        try:
            return self.fn(*args, **kw)
        except BaseException as e:  # noqa: BLE001
            raise _as_fault(e) from e

    def _structure(self, out, s: int, ofs: bool):
        """The outputs as the contract says, or a Fault naming what is not."""
        torch = self.torch
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise Fault("structure", f"returned {type(out).__name__}, expected a pair (o, final_state)")
        o, final = out
        want = self.arena[2][s]
        checks = [("o", o, want["o"])]
        if ofs or final is not None:
            if final is None:
                raise Fault("structure", "final_state is None although output_final_state=True")
            checks.append(("final_state", final, want["final"]))
        for name, t, ref in checks:
            if type(t) is not self._tensor_type:
                raise Fault("structure", f"{name} is a {type(t).__name__}, expected a plain torch.Tensor")
            if tuple(t.shape) != tuple(ref.shape):
                raise Fault("structure", f"{name} has shape {list(t.shape)}, expected {list(ref.shape)}")
            if t.dtype != ref.dtype:
                raise Fault("structure", f"{name} has dtype {t.dtype}, expected {ref.dtype}")
            if t.device != ref.device:
                raise Fault("structure", f"{name} is on {t.device}, expected {ref.device}")
            if not t.is_contiguous():
                raise Fault("structure", f"{name} is not dense (not contiguous), strides {t.stride()}")
            ptr = t.untyped_storage().data_ptr()
            if ptr == self._base_ptr or ptr in self._stage_ptrs:
                raise Fault("structure", f"{name} shares memory with the input {self._aliased(t, s)}")
        return o, (final if len(checks) == 2 else None)

    def _aliased(self, t, s: int) -> str:
        """Which input of set `s` the tensor `t` lies in (the arena is one storage)."""
        p = t.data_ptr()
        for name, x in [*self.arena[1][s].items(), *(self.stage or {}).items()]:
            lo = x.data_ptr()
            if lo <= p < lo + x.numel() * x.element_size():
                return "initial_state" if name == "init" else name
        return "(the shared inputs)"

    def _copy_out(self, o, final, s: int) -> None:
        want = self.arena[2][s]
        self._copy(want["o"], o)
        if final is not None:
            self._copy(want["final"], final)

    def call(self, msg: dict) -> dict:
        s = int(msg["set"])
        args, kw = self._args(msg, s)
        self._stage_in(s)
        if msg.get("poison"):
            with poisoned_allocations(self.torch, self.device):
                out = self._invoke(args, kw)
                self._sync()
        else:
            out = self._invoke(args, kw)
        self._sync()
        o, final = self._structure(out, s, kw["output_final_state"])
        self._copy_out(o, final, s)
        self._stage_out(s)
        self._sync()
        return {"event": "done", "final": final is not None}

    def warmup(self, msg: dict) -> dict:
        args, kw = self._args(msg, int(msg["set"]))
        self._stage_in(int(msg["set"]))
        for _ in range(int(msg.get("n", 1))):
            self._invoke(args, kw)
        self._sync()
        return {"event": "warm"}

    def tampered(self) -> list[str]:
        bad = []
        if globals().get("_perf") is not self._own_clock:
            bad.append("the runner's own clock (_perf) was replaced")
        for obj, name, orig in self._guards:
            now = getattr(obj, name, None)
            label = f"{getattr(obj, '__name__', type(obj).__name__)}.{name}"
            if now is not orig:
                bad.append(f"{label} was replaced")
            elif self._codes.get(id(orig)) is not None and getattr(orig, "__code__", None) is not self._codes[id(orig)]:
                bad.append(f"{label} had its code replaced")
        return bad

    def batch(self, msg: dict) -> dict:
        """Calls back to back, each on its own input set, with the L2 flushed before each and
        events around each (one synchronization for the whole batch), as do_bench times;
        on the CPU the host clock around each call.

        On a GPU each call's input set is first copied into the staging set (before the flush
        and the start event, so outside the events and out of L2), and its outputs are copied
        into the arena as soon as its end event is recorded (enqueued on the same stream) and
        dropped, as in a loop that uses each result and moves on. Work not on the caller's
        stream when the call returns is missed by the copy, and the judge's audit sees it."""
        sets = [int(s) for s in msg["sets"]]
        tamper = self.tampered()
        ms = []
        if self.device == "cuda":
            args, kw = self._args(msg, sets[0]) if sets else ((), {})  # the staging set, refilled per call
            starts = [self._Event(enable_timing=True) for _ in sets]
            ends = [self._Event(enable_timing=True) for _ in sets]
            flush = self._flush if msg.get("flush", True) else None
            lead = msg.get("lead")
            self._sync()
            t0 = _perf()
            if lead is not None:  # untimed: the GPU has work queued when the first timed call is enqueued
                self._stage_in(int(lead))
                self._invoke(args, kw)
            for j, s in enumerate(sets):
                self._stage_in(s)  # stream-ordered after the last call, before the flush and the start event
                if flush is not None:
                    self._zero(flush)
                self._record(starts[j])
                out = self._invoke(args, kw)
                self._record(ends[j])
                o, final = self._structure(out, s, kw["output_final_state"])
                self._copy_out(o, final, s)
                del out, o, final
            self._sync()
            wall = (_perf() - t0) * 1e3
            ms = [self._elapsed(a, b) for a, b in zip(starts, ends)]
        else:
            t0 = _perf()
            for s in sets:
                args, kw = self._args(msg, s)
                self._stage_in(s)  # a no-op unless staging is on (off for a CPU arena)
                ta = _perf()
                out = self._invoke(args, kw)
                ms.append((_perf() - ta) * 1e3)
                o, final = self._structure(out, s, kw["output_final_state"])
                self._copy_out(o, final, s)
                del out, o, final
            wall = (_perf() - t0) * 1e3
        tamper += [t for t in self.tampered() if t not in tamper]
        return {"event": "timed", "ms": ms, "wall_ms": wall, "tamper": tamper}

    def host_cost(self, msg: dict) -> dict:
        """Host time to enqueue one call with the GPU idle (the figure a user without CUDA
        graphs pays on top of GPU time, per call)."""
        args, kw = self._args(msg, int(msg["set"]))
        self._stage_in(int(msg["set"]))
        ms = []
        for _ in range(int(msg.get("n", 3))):
            self._sync()
            t0 = _perf()
            self._invoke(args, kw)
            ms.append((_perf() - t0) * 1e3)
            self._sync()
        return {"event": "host", "ms": ms}

    def health(self) -> str:
        if self.device != "cuda":
            return ""
        try:
            self._sync()
            x = self.torch.ones(16, device="cuda")
            if float((x + 1).sum().item()) != 32.0:
                return "the GPU computed 1 + 1 wrongly"
        except BaseException as e:  # noqa: BLE001
            return f"CUDA context unusable: {type(e).__name__}: {_first_line(e)}"
        return ""


def _itemsize(torch, dt) -> int:
    return torch.empty((), dtype=dt).element_size()


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0][:200] if s else ""


def _as_fault(e: BaseException) -> Fault:
    if isinstance(e, Fault):
        return e
    if isinstance(e, SystemExit):
        return Fault("exit", f"the candidate called sys.exit({e.code!r})")
    tb = traceback.extract_tb(e.__traceback__)
    at = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
    reason = f"raised {type(e).__name__}{at}: {_first_line(e)}"
    if isinstance(e, MemoryError) or _OOM.search(f"{type(e).__name__} {e}"):
        return Fault("oom", f"out of memory: {reason}")
    if _CUDA_FAULT.search(f"{type(e).__name__} {e}"):
        return Fault("cuda", reason)
    if not isinstance(e, Exception):
        return Fault("exit", reason)  # KeyboardInterrupt and kin: the process is not to be trusted after
    return Fault("raised", reason)


class poisoned_allocations:
    """Every freshly allocated floating-point tensor starts as NaN during the call, so an
    output element the candidate never writes shows up as non-finite in the judge's copy."""

    NAMES = ("empty", "empty_like", "empty_strided")

    def __init__(self, torch, device: str):
        self.torch, self.device = torch, device

    def __enter__(self):
        torch = self.torch
        if self.device.startswith("cuda"):
            # Pre-fill the caching allocator with NaN blocks that later allocations reuse.
            free, _ = torch.cuda.mem_get_info()
            torch.full((min(free // 8, 1 << 30) // 4,), float("nan"), device=self.device)
        self.saved = {n: getattr(torch, n) for n in self.NAMES}
        self.saved_new_empty = torch.Tensor.new_empty

        def poison(f):
            def wrapped(*a, **kw):
                t = f(*a, **kw)
                if t.is_floating_point():
                    t.fill_(float("nan"))
                return t
            return wrapped

        for n in self.NAMES:
            setattr(torch, n, poison(self.saved[n]))
        torch.Tensor.new_empty = poison(self.saved_new_empty)
        return self

    def __exit__(self, *exc):
        for n in self.NAMES:
            setattr(self.torch, n, self.saved[n])
        self.torch.Tensor.new_empty = self.saved_new_empty
        return False


def _serve(runner: Runner, ch: Channel) -> int:
    ops = {"call": runner.call, "warmup": runner.warmup, "batch": runner.batch, "host_cost": runner.host_cost}
    while True:
        msg, fds = ch.recv()
        if msg is None or msg.get("op") == "exit":
            return 0
        op = msg.get("op")
        try:
            if op == "load":
                runner.load(msg["path"], msg.get("folder", ""))
                ch.send({"event": "loaded"})
            elif op == "arena":
                runner.open_arena(msg, fds)
                ch.send({"event": "arena"})
            elif op == "close_arena":
                runner.close_arena()
                ch.send({"event": "closed"})
            elif op in ops:
                ch.send(ops[op](msg))
            else:
                ch.send({"event": "fault", "kind": "structure", "reason": f"unknown op {op!r}"})
        except BaseException as e:  # noqa: BLE001 - report, then leave if the process cannot be trusted
            f = _as_fault(e)
            if f.kind in ("oom", "raised", "import", "structure") and runner.device == "cuda":
                sick = runner.health()
                if sick:
                    f = Fault("cuda", f"{f.reason}; {sick}")
            ch.send({"event": "fault", "kind": f.kind, "reason": f.reason})
            if f.kind in ("cuda", "exit"):
                return 3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="runner.py")
    ap.add_argument("--device", choices=("cuda", "cpu"), required=True)
    ap.add_argument("--channel", type=int, required=True, help="the socket pair's file descriptor")
    ap.add_argument("--memory-limit", type=int, default=0, help="RLIMIT_AS in bytes (CPU only; 0 = none)")
    args = ap.parse_args(argv)
    try:  # die with the judge even while stopped (SIGKILL reaches a stopped process)
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001
        pass
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        if args.memory_limit:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (args.memory_limit, args.memory_limit))
    import faulthandler

    faulthandler.enable(file=sys.stderr)
    ch = Channel(args.channel)
    try:
        runner = Runner(args.device, ch)
    except BaseException as e:  # noqa: BLE001
        ch.send({"event": "fault", "kind": "exit", "reason": f"runner failed to start: {type(e).__name__}: {_first_line(e)}"})
        return 3
    import torch

    ch.send({"event": "ready", "pid": os.getpid(), "torch": torch.__version__, "uid": os.getuid(),
             "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu"})
    rc = _serve(runner, ch)
    sys.stderr.flush()
    os._exit(rc)  # skip teardown: candidate threads or CUDA state must not hang the exit


if __name__ == "__main__":
    sys.exit(main())
