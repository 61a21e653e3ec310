"""Shared arenas: the memory through which the judge and an executor exchange tensors.

One arena holds `sets` input sets of one shape (q, k, v, g, beta, A_log, dt_bias and an
initial state) and as many output slots (o, final state). The judge writes inputs, the
executor's runner calls the candidate on a set and copies its outputs into that set's
slots, and the judge takes its own copy of them. Nothing crosses by pickling.

  cpu   a memfd, mapped by both processes (its descriptor travels over the executor's
        socket with SCM_RIGHTS)
  cuda  one device allocation (the driver API's cuMemAlloc), shared by a CUDA IPC handle
        that the runner opens with cuIpcOpenMemHandle (tested across bubblewrap's PID
        namespace and under another uid on the H200)

Every arena is its executor's alone: a candidate's executor never maps the baseline's.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from dataclasses import dataclass

import torch

ALIGN = 256
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


@dataclass(frozen=True)
class Slot:
    role: str  # "in" or "out"
    set: int
    name: str
    offset: int
    shape: tuple
    dtype: str

    def message(self) -> dict:
        return {"role": self.role, "set": self.set, "name": self.name, "offset": self.offset,
                "shape": list(self.shape), "dtype": self.dtype}


def layout(dims: dict, sets: int) -> tuple[list[Slot], int]:
    """Slots of `sets` input sets and output slots at a shape, and the bytes they need."""
    B, T, H, K, V = (dims[k] for k in "BTHKV")
    per_set = [("in", "q", (B, T, H, K), "bfloat16"), ("in", "k", (B, T, H, K), "bfloat16"),
               ("in", "v", (B, T, H, V), "bfloat16"), ("in", "g", (B, T, H, K), "bfloat16"),
               ("in", "beta", (B, T, H), "bfloat16"), ("in", "A_log", (H,), "float32"),
               ("in", "dt_bias", (H, K), "float32"), ("in", "init", (B, H, V, K), "float32"),
               ("out", "o", (B, T, H, V), "bfloat16"), ("out", "final", (B, H, V, K), "float32")]
    slots, off = [], 0
    for s in range(sets):
        for role, name, shape, dt in per_set:
            slots.append(Slot(role, s, name, off, shape, dt))
            n = 1
            for d in shape:
                n *= d
            off += -(-n * (2 if dt == "bfloat16" else 4) // ALIGN) * ALIGN
    return slots, off


def set_bytes(dims: dict) -> int:
    return layout(dims, 1)[1]


class _Driver:
    """The few CUDA driver calls an arena needs (libcuda is loaded by torch already; the
    calls act on torch's primary context, current on this thread)."""

    class Handle(ctypes.Structure):
        _fields_ = [("reserved", ctypes.c_ubyte * 64)]

    def __init__(self):
        lib = ctypes.CDLL("libcuda.so.1")
        self.alloc = lib.cuMemAlloc_v2
        self.alloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        self.free = lib.cuMemFree_v2
        self.free.argtypes = [ctypes.c_uint64]
        self.get_handle = lib.cuIpcGetMemHandle
        self.get_handle.argtypes = [ctypes.POINTER(self.Handle), ctypes.c_uint64]


_driver: _Driver | None = None


class _DeviceBuffer:
    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}


class Arena:
    def __init__(self, device: str, dims: dict, sets: int):
        global _driver
        self.device, self.dims, self.sets = device, dict(dims), sets
        self.slots, self.size = layout(dims, sets)
        self.size = max(self.size, ALIGN)
        self._fd = None
        self._ptr = None
        self.handle = ""
        if device == "cpu":
            self._fd = os.memfd_create("kdatui-arena", 0)
            os.ftruncate(self._fd, self.size)
            self._mm = mmap.mmap(self._fd, self.size)
            self.base = torch.frombuffer(self._mm, dtype=torch.uint8)
        else:
            torch.cuda.init()
            _driver = _driver or _Driver()
            ptr = ctypes.c_uint64()
            rc = _driver.alloc(ctypes.byref(ptr), self.size)
            if rc != 0:
                raise MemoryError(f"out of GPU memory: an arena of {self.size / 2**30:.1f} GiB "
                                  f"(cuMemAlloc CUresult {rc})")
            self._ptr = ptr.value
            h = _Driver.Handle()
            rc = _driver.get_handle(ctypes.byref(h), self._ptr)
            if rc != 0:
                _driver.free(self._ptr)
                raise RuntimeError(f"cuIpcGetMemHandle failed (CUresult {rc})")
            self.handle = ctypes.string_at(ctypes.addressof(h), 64).hex()
            self.base = torch.as_tensor(_DeviceBuffer(self._ptr, self.size), device="cuda")
        self.inputs: dict[int, dict[str, torch.Tensor]] = {}
        self.outputs: dict[int, dict[str, torch.Tensor]] = {}
        for s in self.slots:
            n = 1
            for d in s.shape:
                n *= d
            dt = DTYPES[s.dtype]
            t = self.base[s.offset: s.offset + n * (2 if s.dtype == "bfloat16" else 4)].view(dt).view(*s.shape)
            (self.outputs if s.role == "out" else self.inputs).setdefault(s.set, {})[s.name] = t

    def message(self) -> dict:
        return {"op": "arena", "kind": "cpu" if self.device == "cpu" else "cuda", "size": self.size,
                "handle": self.handle, "slots": [s.message() for s in self.slots]}

    @property
    def fd(self) -> int | None:
        return self._fd

    def put(self, s: int, p) -> None:
        """Copy a probe's inputs into set `s` (the initial state only when it has one)."""
        dst = self.inputs[s]
        for name, t in p.tensors().items():
            dst["init" if name == "initial_state" else name].copy_(t)

    def settle(self) -> None:
        """Wait for the judge's writes into the arena (the GPU runs them asynchronously): the
        executor must read finished inputs, and no work of the judge's may run beside its calls."""
        if self.device != "cpu":
            torch.cuda.synchronize()

    def poison_outputs(self, s: int) -> None:
        for t in self.outputs[s].values():
            t.fill_(float("nan"))

    def take(self, s: int, final: bool = True):
        """The judge's own copy of set `s`'s outputs (o, final_state or None)."""
        out = self.outputs[s]
        return out["o"].clone(), (out["final"].clone() if final else None)

    def close(self) -> None:
        self.inputs, self.outputs = {}, {}
        self.base = None
        if self._ptr is not None:
            torch.cuda.synchronize()
            _driver.free(self._ptr)
            self._ptr = None
        if self._fd is not None:
            try:
                self._mm.close()
            except BufferError:
                pass  # a view escaped (tests holding a tensor): the mapping goes with the process
            os.close(self._fd)
            self._fd = None
