"""The wide family on a GPU, in one self-contained process: correctness against the fp64
chunked reference, and do_bench timings against fla-core's chunk_kda (and split), whole and
stage by stage. Imports only the kernels, fla, torch and triton (never kdatui.engine), so it
runs while the engine is being changed.

    python bench/wide_dev.py --parts sweep,stages --shapes b1_t8192_h96
    python bench/wide_dev.py --parts check --config '{"prep_warps": 8}'
    python bench/wide_dev.py --parts time --shapes general --config '{}'

Parts:
  sweep   time each config of --sweep (JSON list, or the built-in list) at the first shape,
          with fla and split in the same process; the fastest passing becomes the config of
          the parts after it
  stages  the parallel stage alone (`_stop_after: prep`) and the sequential stage alone (on
          a workspace filled once) for each swept config, at the first shape
  check   random / saturated / correlated inputs (KDA.md §5, built here) against
          reference.chunked in fp64 at every --check-shapes shape, with and without an
          initial state; tolerances of the contract (rtol 0.05, atol 0.5 RMS, RMS 0.03;
          correlated 0.2, 1.0, 0.15)
  time    the config vs fla (and split) at every --shapes shape
Every row is appended to $OUT/wide_dev.jsonl (or --out) as it is measured; the table last.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import zlib
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context

import torch

GENERAL = {  # tasks/kda_fwd_general.toml, B T H (K = V = 128)
    "b1_t8192_h96": (1, 8192, 96), "b1_t2048_h96": (1, 2048, 96), "b1_t4096_h96": (1, 4096, 96),
    "b1_t16384_h96": (1, 16384, 96), "b1_t8192_h32": (1, 8192, 32), "b1_t8192_h64": (1, 8192, 64),
    "b2_t4096_h96": (2, 4096, 96),
}
EXTRA = {"b1_t32768_h96": (1, 32768, 96), "b1_t1000_h96": (1, 1000, 96), "b3_t1000_h16": (3, 1000, 16)}
SWEEP = [  # over the family's CONFIG (CHUNK 32, BV 'auto')
    {}, {"BV": 32}, {"BV": 16}, {"BV": 128, "num_warps": 8}, {"num_stages": 1}, {"num_stages": 3},
    {"prep_warps": 8}, {"CHUNK": 64}, {"CHUNK": 64, "BV": 128, "num_warps": 8},
]
T0 = time.time()
OUT = None
DEVICE = "cuda"


def log(row: dict) -> None:
    row = {"t": round(time.time() - T0, 1), **row}
    print(json.dumps(row), flush=True)
    with open(OUT, "a") as f:
        f.write(json.dumps(row) + "\n")


def shape_of(name: str):
    if name in GENERAL:
        return (*GENERAL[name], 128, 128)
    if name in EXTRA:
        return (*EXTRA[name], 128, 128)
    B, T, H = (int(p[1:]) for p in name.split("_")[:3])
    return B, T, H, 128, 128


def make_inputs(probe: str, B, T, H, K, V, seed: int, init: bool, device=None):
    """KDA.md §5's probes, built here: realistic inputs, every decay pinned at the floor, or one
    repeated unit key and query with beta ~ 0.95 and no decay."""
    device = device or DEVICE
    gen = torch.Generator(device=device).manual_seed(seed)
    rn = lambda *s: torch.randn(*s, generator=gen, device=device)  # noqa: E731
    q, k, v, g, beta = rn(B, T, H, K), rn(B, T, H, K), rn(B, T, H, V), rn(B, T, H, K), rn(B, T, H)
    A_log = torch.log(1 + 15 * torch.rand(H, generator=gen, device=device))
    dt_bias = 0.1 * rn(H, K)
    if probe == "saturated":
        A_log = torch.full((H,), math.log(16.0), device=device)
        dt_bias = torch.zeros(H, K, device=device)
        g = 4.0 + g.abs()
    elif probe == "correlated":
        u = rn(H, K)
        u = u / u.norm(dim=-1, keepdim=True)
        k = u[None, None].expand(B, T, H, K).clone()
        q = k.clone()
        beta = torch.full((B, T, H), 3.0, device=device)
        A_log = torch.zeros(H, device=device)
        dt_bias = torch.zeros(H, K, device=device)
        g = torch.full((B, T, H, K), -20.0, device=device)
    bf = torch.bfloat16
    h0 = rn(B, H, V, K) if init else None
    return dict(q=q.to(bf), k=k.to(bf), v=v.to(bf), g=g.to(bf), beta=beta.to(bf), A_log=A_log.float(),
                dt_bias=dt_bias.float(), initial_state=h0, scale=K ** -0.5, lower_bound=-5.0)


def call(fn, x):
    return fn(x["q"], x["k"], x["v"], x["g"], x["beta"], x["A_log"], x["dt_bias"], scale=x["scale"],
              lower_bound=x["lower_bound"], initial_state=x["initial_state"], output_final_state=True)


def compare(x, y, correlated: bool) -> tuple[bool, float, str]:
    rtol, atol_rms, rms_lim = (0.2, 1.0, 0.15) if correlated else (0.05, 0.5, 0.03)
    if not torch.isfinite(x).all():
        return False, math.inf, "non-finite"
    x = x.double()
    d = (x - y).abs()
    rms = float(d.norm() / y.norm())
    atol = atol_rms * float(y.norm()) / math.sqrt(y.numel())
    nbad = int(((d > atol) & (d > rtol * y.abs())).sum())
    ok = nbad == 0 and rms < rms_lim
    return ok, rms, "" if ok else f"{nbad} elements out, rms {rms:.3g}"


def fla_fn():
    if DEVICE == "cpu":  # smoke test of this script: split stands in for fla
        return family_fn("split", {})
    os.environ["FLA_FLASH_KDA"] = "0"
    from fla.ops.kda import chunk_kda

    def f(q, k, v, g, beta, A_log, dt_bias, *, scale, lower_bound, initial_state, output_final_state):
        with torch.inference_mode():
            return chunk_kda(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                             output_final_state=output_final_state, use_qk_l2norm_in_kernel=True,
                             use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, safe_gate=True,
                             lower_bound=lower_bound, state_v_first=True, A_log=A_log,
                             dt_bias=dt_bias.reshape(-1))
    return f


def family_fn(family: str, config: dict):
    import importlib

    mod = importlib.import_module(f"kdatui.kernels.kda.{family}")
    return lambda *a, **kw: mod.kda_forward(*a, **kw, config=config)


def _warm(family: str, config: dict, dims) -> tuple[str, str, float, str]:
    t = time.perf_counter()
    try:
        x = make_inputs("random", *dims, seed=0, init=True)
        call(family_fn(family, config), x)
        x["initial_state"] = None
        call(family_fn(family, config), x)
        if family == "wide" and "_stop_after" not in config:
            call(family_fn(family, {**config, "_stop_after": "prep"}), x)
        torch.cuda.synchronize()
        return family, json.dumps(config), time.perf_counter() - t, ""
    except Exception as e:
        return family, json.dumps(config), time.perf_counter() - t, f"{type(e).__name__}: {str(e)[:400]}"


def precompile(jobs, dims_list, workers=12) -> dict:
    errors = {}
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        futs = [pool.submit(_warm, f, c, d) for f, c in jobs for d in dims_list]
        for fut in as_completed(futs):
            fam, cfg, secs, err = fut.result()
            log({"part": "compile", "family": fam, "config": cfg, "s": round(secs, 1), "error": err})
            if err:
                errors[(fam, cfg)] = err
    return errors


def bench(fn, x) -> float:
    if DEVICE == "cpu":
        t = time.perf_counter()
        call(fn, x)
        return (time.perf_counter() - t) * 1e3
    from triton.testing import do_bench

    return do_bench(lambda: call(fn, x), warmup=25, rep=150, return_mode="median")


def walk_only_ms(config: dict, x) -> float:
    """The sequential stage alone, on a workspace the parallel stage filled once."""
    from triton.testing import do_bench

    from kdatui.kernels.kda import wide

    cfg = {**wide.CONFIG, **config}
    B, T, H, K = x["q"].shape
    V = x["v"].shape[-1]
    ws = wide.workspace(B, H, T, K, V, cfg["CHUNK"], x["q"].device)
    wide.prep(x["q"], x["k"], x["v"], x["g"], x["beta"], x["A_log"], x["dt_bias"], ws, scale=x["scale"],
              lower_bound=x["lower_bound"], cfg=cfg)
    o = torch.empty(B, T, H, V, dtype=torch.bfloat16, device=DEVICE)
    hT = torch.empty(B, H, V, K, dtype=torch.float32, device=DEVICE)
    h0 = x["initial_state"]
    run = lambda: wide.walk(ws, h0, o, hT, B=B, T=T, H=H, K=K, V=V, cfg=cfg, has_h0=h0 is not None,  # noqa: E731
                            store_ht=True)
    if DEVICE == "cpu":
        t = time.perf_counter()
        run()
        ms = (time.perf_counter() - t) * 1e3
    else:
        ms = do_bench(run, warmup=25, rep=150, return_mode="median")
    del ws
    return ms


def check_config(fn, name, dims, label, refs) -> bool:
    good = True
    for probe, init in (("random", True), ("random", False), ("saturated", True), ("correlated", True)):
        x = make_inputs(probe, *dims, seed=zlib.crc32(f"{name} {probe} {init}".encode()), init=init)
        key = (name, probe, init)
        if key not in refs:
            from kdatui.kernels.kda import reference

            if any(k[0] != name for k in refs):
                refs.clear()  # one shape's references at a time: they are large
            ro, rs = reference.chunked(x["q"], x["k"], x["v"], x["g"], x["beta"], x["A_log"], x["dt_bias"],
                                       scale=x["scale"], lower_bound=x["lower_bound"],
                                       initial_state=x["initial_state"])
            refs[key] = (ro, rs)
        ro, rs = refs[key]
        o, s = call(fn, x)
        o2, s2 = call(fn, x)  # twice: a race shows as a moving result
        same = bool(torch.equal(o, o2) and torch.equal(s, s2))
        ok_o, rms_o, why_o = compare(o, ro, probe == "correlated")
        ok_s, rms_s, why_s = compare(s, rs, probe == "correlated")
        ok = ok_o and ok_s and same
        good &= ok
        log({"part": "check", "label": label, "shape": name, "probe": probe, "init": init, "ok": ok,
             "rms_o": rms_o, "rms_state": rms_s, "repeatable": same, "why": why_o or why_s})
    return good


def main(argv=None) -> int:
    global OUT, DEVICE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="sweep,stages,check,time")
    ap.add_argument("--shapes", default="b1_t8192_h96", help="names, comma-separated, or 'general'")
    ap.add_argument("--check-shapes", default="b1_t1000_h96,b3_t1000_h16")
    ap.add_argument("--sweep", help="JSON list of wide configs (default: the built-in list)")
    ap.add_argument("--config", default="{}", help="wide config for check/time when no sweep runs")
    ap.add_argument("--extra", default="", help="more configs for 'time' (JSON list, each over the chosen one)")
    ap.add_argument("--split", action="store_true", help="time split beside wide in 'time'")
    ap.add_argument("--budget", type=float, default=540, help="seconds; later parts are skipped past it")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: a smoke test of this script through the Triton interpreter (tiny shapes)")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "wide_dev.jsonl"))
    args = ap.parse_args(argv)
    OUT = args.out
    DEVICE = args.device
    if DEVICE == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    parts = args.parts.split(",")
    shapes = list(GENERAL) if args.shapes == "general" else args.shapes.split(",")
    first = shapes[0]
    log({"part": "env", "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu",
         "torch": torch.__version__,
         "triton": __import__("triton").__version__})
    sweep = json.loads(args.sweep) if args.sweep else SWEEP
    config = json.loads(args.config)
    extra = json.loads(args.extra) if args.extra else []
    configs = sweep if "sweep" in parts else [config] + extra
    jobs = [("wide", c) for c in configs] + [("split", {})]
    if "stages" in parts:
        jobs.append(("split", {"_stop_after": "prep"}))
    warm_dims = [(1, 1024, 16, 128, 128)]
    if "check" in parts:
        warm_dims.append((1, 1000, 16, 128, 128))  # T not a multiple of 16 specializes apart
    errors = precompile(jobs, warm_dims) if DEVICE == "cuda" else {}
    fla = fla_fn()
    results = []
    if "sweep" in parts or "stages" in parts:
        x = make_inputs("random", *shape_of(first), seed=1, init=True)
        base = bench(fla, x)
        log({"part": "sweep", "shape": first, "family": "fla", "ms": base})
        sp = bench(family_fn("split", {}), x)
        log({"part": "sweep", "shape": first, "family": "split", "ms": sp, "speedup": base / sp})
        for c in configs:
            if ("wide", json.dumps(c)) in errors:
                continue
            ms = bench(family_fn("wide", c), x)
            results.append((ms, c))
            log({"part": "sweep", "shape": first, "family": "wide", "config": c, "ms": ms, "speedup": base / ms})
        if "stages" in parts:
            ms = bench(family_fn("split", {"_stop_after": "prep"}), x)
            log({"part": "stages", "shape": first, "family": "split", "stage": "prep", "ms": ms})
            for _, c in sorted(results, key=lambda r: r[0]):
                if time.time() - T0 > args.budget * 0.6:
                    break
                p = bench(family_fn("wide", {**c, "_stop_after": "prep"}), x)
                w = walk_only_ms(c, x)
                log({"part": "stages", "shape": first, "family": "wide", "config": c, "prep_ms": p, "walk_ms": w})
        del x
        torch.cuda.empty_cache() if DEVICE == "cuda" else None
    chosen = [r for r in results if "_skip" not in r[1]]  # a stage left out computes the wrong thing
    if chosen:
        config = min(chosen, key=lambda r: r[0])[1]
        log({"part": "chosen", "config": config})
    summary = []
    if "check" in parts:
        refs: dict = {}
        for name in args.check_shapes.split(","):
            for label, c in [("chosen", config)] + ([("default", {})] if config != {} else []):
                if time.time() - T0 > args.budget:
                    log({"part": "check", "skipped": name, "why": "budget"})
                    continue
                ok = check_config(family_fn("wide", c), name, shape_of(name), label, refs)
                summary.append(("check", label, name, "PASS" if ok else "FAIL"))
        del refs
        torch.cuda.empty_cache() if DEVICE == "cuda" else None
    if "time" in parts:
        for name in shapes:
            if time.time() - T0 > args.budget:
                log({"part": "time", "skipped": name, "why": "budget"})
                continue
            x = make_inputs("random", *shape_of(name), seed=2, init=True)
            base = bench(fla, x)
            row = {"part": "time", "shape": name, "fla_ms": base}
            for c in [config] + [{**config, **e} for e in extra]:
                ms = bench(family_fn("wide", c), x)
                row[f"wide {json.dumps(c)}"] = ms
                summary.append(("time", json.dumps(c), name, f"{ms:.3f} ms {base / ms:.2f}x (fla {base:.3f})"))
            if args.split:
                ms = bench(family_fn("split", {}), x)
                row["split"] = ms
                summary.append(("time", "split", name, f"{ms:.3f} ms {base / ms:.2f}x (fla {base:.3f})"))
            log(row)
            del x
            torch.cuda.empty_cache() if DEVICE == "cuda" else None
    print()
    for ms, c in sorted(results, key=lambda r: r[0]):
        print(f"sweep {json.dumps(c):<48} {ms:7.3f} ms")
    for s in summary:
        print(" ".join(s))
    print(f"total {time.time() - T0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
