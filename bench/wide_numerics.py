"""The wide family's arithmetic in torch, with each product's operand rounding emulated, run
through the contract's probes on the CPU: which products of a chunk need fp32 operands and
which can take tf32 or bf16, decided before any GPU time is spent.

    python bench/wide_numerics.py                        # the family's plan (bf16), every probe
    python bench/wide_numerics.py --inv tf32             # the 16x16 inverse in tf32 (fails)
    python bench/wide_numerics.py --T 8192 --H 1 --chunk 32

The algorithm is the one of kernels/kda/wide.py (KDA.md §3, §4): a chunk of 32 or 64 in
halves of 32; a half's A and M one product anchored at its middle, the pairs across two
halves one product anchored at the boundary; the 16x16 diagonal blocks of I + A inverted by
doubling (--inv); a half's inverse T = D - (D A_off) D (--t); W = T diag(beta) (k^ exp G),
U = T diag(beta) V, and for the second half W_2 = T_22 (B_2 - A_21 W_1) (--wu); a bf16
workspace; the state walk in --state operands with an fp32 state. Emulated operand
roundings: 'bf16' (round to nearest even), 'tf32' (the 13 low mantissa bits dropped, as the
tensor cores read fp32), 'tf32x3' (a tf32 head and tail, three products), 'ieee' (fp32).
Products accumulate in fp64 and round to fp32.
"""

from __future__ import annotations

import argparse
import sys

import torch

from kdatui.engine.checks import compare
from kdatui.engine.probes import make_probe
from kdatui.engine.task import Contract, Shape
from kdatui.kernels.kda import reference

LOG2E = 1.4426950408889634


def rnd(x: torch.Tensor, mode: str) -> torch.Tensor:
    x = x.to(torch.float32)
    if mode == "bf16":
        return x.to(torch.bfloat16).to(torch.float32)
    if mode == "tf32":
        return (x.view(torch.int32) & ~0x1FFF).view(torch.float32)
    return x


def dot(a, b, mode):
    return (rnd(a, mode).double() @ rnd(b, mode).double()).to(torch.float32)


def _dot3(a, b):  # tf32x3: the operands split into a tf32 head and a tf32 tail
    ah, bh = rnd(a, "tf32"), rnd(b, "tf32")
    al, bl = rnd(a - ah, "tf32"), rnd(b - bh, "tf32")
    return (ah.double() @ bh.double() + ah.double() @ bl.double() + al.double() @ bh.double()).to(torch.float32)


def _mm(a, b, mode):
    return _dot3(a, b) if mode == "tf32x3" else dot(a, b, mode)


def _diag_half(qn, kn, G, mid, be, scale, am):
    """A and M of one 32-token half, anchored at its middle (both factors within 2^+-116)."""
    r = torch.arange(qn.shape[-2])
    L, R = kn * torch.exp2(G - mid[..., None, :]), kn * torch.exp2(mid[..., None, :] - G)
    QL = qn * torch.exp2(G - mid[..., None, :])
    A = torch.where(r[:, None] > r[None, :], dot(L, R.transpose(-1, -2), am), 0.0) * be[..., None]
    M = torch.where(r[:, None] >= r[None, :], dot(QL, R.transpose(-1, -2), am), 0.0) * scale
    return A, M


def _half_inverse(A, tmode, inv):
    """(I + A)^-1 of a 32x32 strictly lower A: the two 16x16 diagonal blocks by doubling,
    then T = D - (D A_off) D (the off-diagonal part squares to zero)."""
    r = torch.arange(32)
    same = (r[:, None] // 16) == (r[None, :] // 16)
    P = -torch.where(same, A, 0.0)
    D = torch.eye(32) + P
    for _ in range(3):
        P = _mm(P, P, inv)
        D = D + _mm(D, P, inv)
    N = dot(D, torch.where(same, 0.0, A), tmode)
    return D - dot(N, D, tmode)


def wide_forward(p, am="bf16", tmode="bf16", wu="bf16", state="bf16", ws="bf16", inv="ieee", C=64):
    q, k, v, g, beta = (x.float() for x in (p.q, p.k, p.v, p.g, p.beta))
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale, lb2 = p.scale, p.lower_bound * LOG2E
    bh = lambda x: x.transpose(1, 2)  # noqa: E731  [B,T,H,D] -> [B,H,T,D]
    q, k, v, g = bh(q), bh(k), bh(v), bh(g)
    beta = torch.sigmoid(beta.transpose(1, 2))  # [B,H,T]
    qn = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
    kn = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    gate = torch.exp(p.A_log.float())[None, :, None, None] * (g + p.dt_bias.float()[None, :, None, :])
    a2 = lb2 * torch.sigmoid(gate)
    S = torch.zeros(B, H, K, V) if p.initial_state is None else p.initial_state.float().transpose(-1, -2).clone()
    o = torch.empty(B, H, T, V)

    def half(t0):
        n = max(0, min(32, T - t0))
        pad = lambda x: torch.nn.functional.pad(x[:, :, t0:t0 + n], (0, 0, 0, 32 - n))  # noqa: E731
        be = torch.nn.functional.pad(beta[:, :, t0:t0 + n], (0, 32 - n))
        ah = pad(a2)
        return pad(qn), pad(kn), pad(v), ah, be, torch.cumsum(ah, 2), ah.sum(2), ah[:, :, :16].sum(2)

    for t0 in range(0, T, C):
        qn1, kn1, v1, a1, be1, G1, tot1, mid1 = half(t0)
        glast = tot1
        if C == 64:
            qn2, kn2, v2, a2h, be2, G2, tot2, mid2 = half(t0 + 32)
            glast = tot1 + tot2
        A11, M11 = _diag_half(qn1, kn1, G1, mid1, be1, scale, am)
        T11 = _half_inverse(A11, tmode, inv)
        eG1 = torch.exp2(G1)
        W1 = dot(T11, be1[..., None] * kn1 * eG1, wu)
        U1 = dot(T11, be1[..., None] * v1, wu)
        Qt, Kt, W, U, M = scale * qn1 * eG1, kn1 * torch.exp2(glast[:, :, None] - G1), W1, U1, M11
        if C == 64:
            A22, M22 = _diag_half(qn2, kn2, G2, mid2, be2, scale, am)
            RQ1 = kn1 * torch.exp2(tot1[:, :, None] - G1)
            eG2 = torch.exp2(G2)
            A21 = dot(kn2 * eG2, RQ1.transpose(-1, -2), am) * be2[..., None]
            M21 = dot(qn2 * eG2, RQ1.transpose(-1, -2), am) * scale
            T22 = _half_inverse(A22, tmode, inv)
            e1 = torch.exp2(tot1)[:, :, None, :]
            W2 = dot(T22, be2[..., None] * kn2 * eG2 * e1 - dot(A21, W1, wu), wu)
            U2 = dot(T22, be2[..., None] * v2 - dot(A21, U1, wu), wu)
            Qt = torch.cat([Qt, scale * qn2 * eG2 * e1], 2)
            Kt = torch.cat([Kt, kn2 * torch.exp2(tot2[:, :, None] - G2)], 2)
            W, U = torch.cat([W1, W2], 2), torch.cat([U1, U2], 2)
            M = torch.cat([torch.cat([M11, torch.zeros_like(M11)], 3), torch.cat([M21, M22], 3)], 2)
        W, U, Qt, Kt, M = (rnd(x, ws) for x in (W, U, Qt, Kt, M))
        X = U - dot(W, S, state)
        O = dot(Qt, S, state) + dot(M, X, state)
        S = torch.exp2(glast)[..., None] * S + dot(Kt.transpose(-1, -2), X, state)
        n = min(C, T - t0)
        o[:, :, t0:t0 + n] = O[:, :, :n]
    return o.transpose(1, 2).to(torch.bfloat16), S.transpose(-1, -2).contiguous()


PROBES = ("random", "saturated", "strong", "mixed_depth", "switch", "boundary", "correlated", "random_depth")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunk", type=int, default=32, choices=(32, 64))
    ap.add_argument("--am", default="bf16", help="operands of the A and M products")
    ap.add_argument("--t", default="bf16", help="operands of the N = D A_off and N D products")
    ap.add_argument("--wu", default="bf16", help="operands of W = T B_w and U = T B_u")
    ap.add_argument("--state", default="bf16", help="operands of the state products")
    ap.add_argument("--inv", default="ieee", help="operands of the 16x16 doubling inverse products")
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--T", type=int, default=1000)
    ap.add_argument("--H", type=int, default=2)
    ap.add_argument("--K", type=int, default=128)
    args = ap.parse_args(argv)
    shape = Shape("s", args.B, args.T, args.H, args.K, args.K)
    contract = Contract()
    ok = True
    for name in PROBES + ("fp64_correlated",):
        p = make_probe(name, shape, contract)
        ref = (reference.token_loop if p.reference == "token_loop" else reference.chunked)(*p.args(), **p.kwargs())
        o, s = wide_forward(p, args.am, args.t, args.wu, args.state, inv=args.inv, C=args.chunk)
        cs = [compare(x, y, p.tolerance, w) for x, y, w in ((o, ref[0], "o"), (s, ref[1], "state"))]
        good = all(c.ok for c in cs)
        ok &= good
        print(f"{name:<16} {'ok ' if good else 'FAIL'} rms o {cs[0].rms_ratio:.2e} state {cs[1].rms_ratio:.2e}"
              f"  {'' if good else next(c.reason for c in cs if not c.ok)}", flush=True)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
