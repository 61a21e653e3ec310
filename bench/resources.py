"""What a kernel variant costs in registers, spills, shared memory and instructions on a
Hopper GPU (sm_90), read off the compiler on any machine: no GPU needed.

    python bench/resources.py fused                       # the family's defaults
    python bench/resources.py split '{"prep_warps": 8}'   # a variant
    python bench/resources.py fused '{"GROUP": 4}' --sass sass.txt

The family's own `kda_forward` runs with its launches intercepted, so every kernel is
compiled with exactly the arguments and constexprs a real call would give it; then
Triton's bundled ptxas reports registers and spills, and nvdisasm's SASS gives the
instruction mix (barriers and shared-memory traffic mark the layout conversions that
dominate a latency-bound chunk loop). Use it before spending device time: a variant that
spills kilobytes per thread will not be fast.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

# Compile for the GPU, never interpret: triton.jit reads this when the family modules are
# imported (a script, so changing its own environment is fine; import it in a subprocess).
os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from kdatui.engine.probes import make_probe  # noqa: E402
from kdatui.engine.task import Contract, Shape  # noqa: E402
from kdatui.kernels.kda import families  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.int32: "i32",
          torch.int64: "i64"}
MIX = ("BAR", "LDS", "STS", "LDSM", "HMMA", "HGMMA", "FFMA", "MUFU", "SHFL", "LDG", "STG", "LDL", "STL")


def launches(family: str, config: dict, shape: Shape) -> list[tuple[JITFunction, tuple, dict]]:
    """Every kernel launch `kda_forward` makes for `config` at `shape`, not run."""
    seen: list = []
    real = JITFunction.run

    def capture(self, *args, grid, warmup, **kwargs):
        seen.append((self, args, kwargs))

    JITFunction.run = capture
    try:
        p = make_probe("random", shape, Contract(), "cpu")
        families.module(family).kda_forward(*p.args(), **p.kwargs(), config=config)
    finally:
        JITFunction.run = real
    return seen


def signature(fn: JITFunction, args: tuple, kwargs: dict) -> tuple[dict, dict, dict, dict]:
    values = dict(zip(fn.arg_names, args))
    values.update({k: v for k, v in kwargs.items() if k in fn.arg_names})
    options = {k: v for k, v in kwargs.items() if k not in fn.arg_names}
    sig, constexprs, attrs = {}, {}, {}
    for i, (param, name) in enumerate(zip(fn.params, fn.arg_names)):
        v = values[name]
        if param.is_constexpr:
            sig[name] = "constexpr"
            constexprs[name] = v
        elif isinstance(v, torch.Tensor):
            sig[name] = "*" + DTYPES[v.dtype]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif type(v).__name__ == "TensorDescriptor":  # triton.tools.tensor_descriptor (TMA)
            sig[name] = f"tensordesc<{DTYPES[v.base.dtype]}[{','.join(str(d) for d in v.block_shape)}]>"
        elif isinstance(v, bool):
            sig[name] = "i1"
        elif isinstance(v, int):
            sig[name] = "i32" if -2**31 <= v < 2**31 else "i64"
            if v % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, float):
            sig[name] = "fp32"
        else:
            raise TypeError(f"{fn.__name__}: argument {name} of type {type(v).__name__}")
    return sig, constexprs, attrs, options


def report(fn: JITFunction, args: tuple, kwargs: dict, sass_path: str | None = None) -> dict:
    sig, constexprs, attrs, options = signature(fn, args, kwargs)
    opts = {"num_warps": options.get("num_warps", 4), "num_stages": options.get("num_stages", 3)}
    if options.get("maxnreg"):
        opts["maxnreg"] = options["maxnreg"]
    k = triton.compile(ASTSource(fn, sig, constexprs, attrs), target=TARGET, options=opts)
    with tempfile.TemporaryDirectory() as tmp:
        ptx = os.path.join(tmp, "k.ptx")
        with open(ptx, "w") as f:
            f.write(k.asm["ptx"])
        for ptxas in ("ptxas", "ptxas-blackwell"):  # Triton 3.9's PTX is newer than its `ptxas`
            run = subprocess.run([os.path.join(BIN, ptxas), "-v", "--gpu-name", "sm_90a", ptx, "-o", ptx + ".o"],
                                 capture_output=True, text=True)
            out = run.stderr
            if run.returncode == 0:
                break
        else:
            raise RuntimeError(f"{fn.__name__}: no ptxas of {BIN} assembles Triton's PTX: {out.strip()[-300:]}")
        cubin = os.path.join(tmp, "k.cubin")
        with open(cubin, "wb") as f:
            f.write(k.asm["cubin"])
        sass = subprocess.run([os.path.join(BIN, "nvdisasm"), "-c", cubin], capture_output=True, text=True).stdout
    if sass_path:
        with open(sass_path, "a") as f:
            f.write(f"// ---- {fn.__name__}\n{sass}\n")
    mix = collections.Counter()
    for line in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if m:
            mix[m.group(1)] += 1

    def num(pattern):
        m = re.search(pattern, out)
        return int(m.group(1)) if m else None

    return {"kernel": fn.__name__, **opts, "registers": num(r"Used (\d+) registers"),
            "spill_bytes": num(r"(\d+) bytes spill stores"), "stack_bytes": num(r"(\d+) bytes stack frame"),
            "shared_bytes": k.metadata.shared, "instructions": sum(mix.values()),
            "mix": {op: mix.get(op, 0) for op in MIX}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("family", choices=sorted(families.FAMILIES))
    ap.add_argument("config", nargs="?", default="{}", help="JSON of tunables over the family's CONFIG")
    ap.add_argument("--shape", default="1,1024,16,128,128", help="B,T,H,K,V of the call (default 1,1024,16,128,128)")
    ap.add_argument("--sass", help="append each kernel's SASS to this file")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args(argv)
    try:
        config = json.loads(args.config)
        if not isinstance(config, dict):
            raise ValueError(f"config {args.config!r} is not a JSON object of tunables")
        families.validate(args.family, {k: v for k, v in config.items() if not k.startswith("_")})
        dims = [int(x) for x in args.shape.split(",")]
        if len(dims) != 5:
            raise ValueError(f"--shape {args.shape!r}: want B,T,H,K,V")
        shape = Shape("s", *dims)
    except ValueError as e:  # json.JSONDecodeError is one
        print(f"bench/resources.py: {e}", file=sys.stderr)
        return 2
    rows = [report(fn, a, kw, args.sass) for fn, a, kw in launches(args.family, config, shape)]
    if args.json:
        print(json.dumps({"family": args.family, "config": config, "kernels": rows}, indent=1))
        return 0
    print(f"{args.family} {json.dumps(config)} for sm_90 (Triton {triton.__version__})")
    for r in rows:
        mix = " ".join(f"{k} {v}" for k, v in r["mix"].items() if v)
        print(f"  {r['kernel']}: {r['num_warps']} warps, {r['registers']} registers, {r['spill_bytes']} B spilled, "
              f"{r['shared_bytes']} B shared, {r['instructions']} instructions ({mix})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
