#!/usr/bin/env python3
"""The device correctness grid: every case of scripts/grid_spec.py run
through the Python binding and compared bit for bit with a reference built
here with torch (on the GPU) or numpy (``--backend host``, for checking this
script and the host kernels on a machine without a GPU).

Per case and T:
  * caches live in byte buffers [256-byte lead canary | cache | slack
    canary]; the cache area starts as random bytes; the *whole* buffer must
    equal the reference after each launch (only the rows named by valid slots
    change, canaries intact);
  * reshape_and_cache: the reference writes each valid token's rows at
    element offsets computed here from the layout (block * block_stride +
    token * token_stride + head * head_stride + base + e, with strides written
    out in this file / grid_spec.Case.real_strides, not taken from kvgen);
    fp8 values are (x.float() / scale).clamp(-max, max).to(fp8) bits,
    others the input's bits (or x.to(cache dtype) when the io dtype differs);
  * the inputs must not change; checked kernels must set error_flag exactly
    when a slot is out of range, and skip those tokens;
  * gather (raw), gather with dequantize ((q.float() * scale).to(out)) and
    converting gathers are compared the same way on output buffers that
    start as random bits (rows of padding slots must stay untouched, as must
    the gaps of strided output views), and must leave the caches unchanged;
  * a few API checks (too-small / misaligned caches, missing arguments, T=0,
    side streams) check that errors are raised and nothing is written.

Usage (on the GPU machine):
  python3 scripts/device_grid.py --bundle .dev/bundle \
      --lib build-dev/lib/libkvgen-runtime.so --out $OUT/grid
Exit status 0 only when every check passed. Writes grid_results.json and
grid_summary.txt to --out and prints `N passed, M failed`.
"""

import argparse
import json
import math
import os
import re
import sys
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python"))

import grid_spec as G  # noqa: E402

CANARY = 0xA5
LEAD = 256  # canary bytes before each cache (keeps 256-byte alignment)
FP8_MAX = {"f8E4M3FN": 448.0, "f8E4M3FNUZ": 240.0, "f8E5M2": 57344.0,
           "f8E5M2FNUZ": 57344.0}
ESIZE = {"bf16": 2, "f16": 2, "f32": 4, "f8E4M3FN": 1, "f8E4M3FNUZ": 1,
         "f8E5M2": 1, "f8E5M2FNUZ": 1}
# Values planted into every input (every 997th element): saturation, fp8
# underflow to (+-)0, zeros.
SPECIALS = [30000.0, -30000.0, 1e-7, -1e-7, 0.0, -0.0, 3.0e-3, -700.0,
            65000.0, -1e-30]


#---------------------------------------------------------------------------
# Array back ends: torch (the device run) and numpy (local checks).
#---------------------------------------------------------------------------

class TorchX:
    """torch on one CUDA device."""
    name = "torch"

    def __init__(self, device):
        import torch
        self.torch = torch
        self.dev = torch.device("cuda", device)
        torch.cuda.set_device(self.dev)
        self.DT = {"bf16": torch.bfloat16, "f16": torch.float16,
                   "f32": torch.float32, "f8E4M3FN": torch.float8_e4m3fn,
                   "f8E4M3FNUZ": torch.float8_e4m3fnuz,
                   "f8E5M2": torch.float8_e5m2,
                   "f8E5M2FNUZ": torch.float8_e5m2fnuz}
        self.INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32}
        self.specials = torch.tensor(SPECIALS, dtype=torch.float32,
                                     device=self.dev)

    def gen(self, seed):
        g = self.torch.Generator(device=self.dev)
        g.manual_seed(seed)
        return g

    def u8(self, n, fill=None):
        t = self.torch.empty(n, dtype=self.torch.uint8, device=self.dev)
        if fill is not None:
            t.fill_(fill)
        return t

    def fill_random(self, gen, t):
        """Random bytes into the uint8 tensor t (in place)."""
        if t.numel():
            t.random_(0, 256, generator=gen)

    def randn(self, gen, shape, io):
        x = self.torch.randn(shape, generator=gen, device=self.dev,
                             dtype=self.torch.float32) * 2.0
        flat = x.view(-1)
        idx = self.torch.arange(0, flat.numel(), 997, device=self.dev)
        flat[idx] = self.specials[self.torch.arange(
            idx.numel(), device=self.dev) % len(SPECIALS)]
        return x.to(self.DT[io])

    def allbits(self, shape, io, start):
        """Every 16-bit pattern of io in order from `start` (wrapping), NaN
        patterns replaced by the infinity of their sign (see allbits_np)."""
        b = self.torch.from_numpy(allbits_np(math.prod(shape), io, start))
        return b.to(self.dev).view(self.DT[io]).view(shape)

    def rand_typed(self, gen, shape, dt):
        n = math.prod(shape)
        u = self.u8(n * ESIZE[dt])
        self.fill_random(gen, u)
        return u.view(self.DT[dt]).view(shape)

    def rows(self, fused, c0, H, D):
        """[T, H, D] view of columns [c0, c0 + H*D) of a [T, W] tensor."""
        return self.torch.as_strided(fused, (fused.shape[0], H, D),
                                     (fused.stride(0), D, 1),
                                     fused.storage_offset() + c0)

    def upload(self, a):
        return self.torch.from_numpy(np.ascontiguousarray(a)).to(self.dev)

    def bits(self, t):
        return t.view(self.INT[t.element_size()])

    def typed(self, u8, dt):
        """Bits of cache dtype dt over a 1-D uint8 tensor."""
        return u8.view(self.INT[ESIZE[dt]])

    def clone(self, t):
        return t.clone()

    def arange(self, n):
        return self.torch.arange(n, device=self.dev, dtype=self.torch.int64)

    def quantize(self, x, scale, dt):
        m = FP8_MAX[dt]
        y = (x.float() / scale).clamp(-m, m)
        return y.to(self.DT[dt]).view(self.torch.uint8)

    def convert(self, x, dt):
        return self.bits(x.to(self.DT[dt]))

    def decode(self, b, dt):
        """float32 values of bits b of dtype dt."""
        return b.view(self.DT[dt]).float()

    def encode(self, v, dt):
        """bits of float32 v rounded to dt."""
        return self.bits(v.to(self.DT[dt]))

    def equal(self, a, b):
        return bool(self.torch.equal(a, b))

    def mismatch(self, a, b):
        d = (a != b).reshape(-1).nonzero().reshape(-1)
        return int(d.numel()), (int(d[0].item()) if d.numel() else -1)

    def sync(self):
        self.torch.cuda.synchronize(self.dev)

    def nonzero(self, mask):
        return mask.nonzero().reshape(-1)

    def zeros_i32(self, n):
        return self.torch.zeros(n, dtype=self.torch.int32, device=self.dev)

    def zero(self, t):
        t.zero_()

    def item(self, t):
        return int(t.reshape(-1)[0].item())

    def floats(self, vals):
        return self.torch.tensor(np.asarray(vals, np.float32),
                                 device=self.dev)

    def reshape(self, t, shape):
        return t.reshape(shape)

    def free(self):
        self.torch.cuda.empty_cache()


class NumpyX:
    """numpy + ml_dtypes on the host (the host backend)."""
    name = "numpy"

    def __init__(self):
        import ml_dtypes
        self.DT = {"bf16": ml_dtypes.bfloat16, "f16": np.float16,
                   "f32": np.float32, "f8E4M3FN": ml_dtypes.float8_e4m3fn,
                   "f8E4M3FNUZ": ml_dtypes.float8_e4m3fnuz,
                   "f8E5M2": ml_dtypes.float8_e5m2,
                   "f8E5M2FNUZ": ml_dtypes.float8_e5m2fnuz}
        self.INT = {1: np.uint8, 2: np.uint16, 4: np.uint32}
        self.specials = np.array(SPECIALS, np.float32)

    def gen(self, seed):
        return np.random.default_rng(seed)

    def u8(self, n, fill=None):
        t = np.empty(n, np.uint8)
        if fill is not None:
            t[...] = fill
        return t

    def fill_random(self, gen, t):
        t[...] = gen.integers(0, 256, size=t.shape, dtype=np.uint8)

    def randn(self, gen, shape, io):
        x = gen.standard_normal(shape, dtype=np.float32) * np.float32(2.0)
        flat = x.reshape(-1)
        idx = np.arange(0, flat.size, 997)
        flat[idx] = self.specials[np.arange(idx.size) % len(SPECIALS)]
        return x.astype(self.DT[io])

    def allbits(self, shape, io, start):
        return allbits_np(math.prod(shape), io, start).view(
            self.DT[io]).reshape(shape)

    def rand_typed(self, gen, shape, dt):
        n = math.prod(shape)
        u = gen.integers(0, 256, size=n * ESIZE[dt], dtype=np.uint8)
        return u.view(self.DT[dt]).reshape(shape)

    def rows(self, fused, c0, H, D):
        # as_strided on integer bits (it rejects ml_dtypes' types), then
        # back to the element type: still a view of `fused`.
        it = fused.itemsize
        v = np.lib.stride_tricks.as_strided(
            fused.view(self.INT[it])[:, c0:], shape=(fused.shape[0], H, D),
            strides=(fused.strides[0], D * it, it))
        return v.view(fused.dtype)

    def upload(self, a):
        return np.ascontiguousarray(a)

    def bits(self, t):
        return t.view(self.INT[t.dtype.itemsize])

    def typed(self, u8, dt):
        return u8.view(self.INT[ESIZE[dt]])

    def clone(self, t):
        return t.copy()

    def arange(self, n):
        return np.arange(n, dtype=np.int64)

    def quantize(self, x, scale, dt):
        m = np.float32(FP8_MAX[dt])
        with np.errstate(over="ignore", invalid="ignore"):
            y = np.clip(x.astype(np.float32) / scale, -m, m)
        return y.astype(self.DT[dt]).view(np.uint8)

    def convert(self, x, dt):
        return self.bits(x.astype(np.float32).astype(self.DT[dt]))

    def decode(self, b, dt):
        return b.view(self.DT[dt]).astype(np.float32)

    def encode(self, v, dt):
        return self.bits(v.astype(self.DT[dt]))

    def equal(self, a, b):
        return bool(np.array_equal(a, b))

    def mismatch(self, a, b):
        d = np.nonzero((a != b).reshape(-1))[0]
        return int(d.size), (int(d[0]) if d.size else -1)

    def sync(self):
        pass

    def nonzero(self, mask):
        return np.nonzero(mask)[0]

    def zeros_i32(self, n):
        return np.zeros(n, np.int32)

    def zero(self, t):
        t[...] = 0

    def item(self, t):
        return int(t.reshape(-1)[0])

    def floats(self, vals):
        return np.asarray(vals, np.float32)

    def reshape(self, t, shape):
        return t.reshape(shape)

    def free(self):
        pass


#---------------------------------------------------------------------------
# Reference geometry (independent of kvgen's code)
#---------------------------------------------------------------------------

def ref_strides(case, side):
    """Element strides (block, token, head) of side 'k' / 'v' in the
    buffers this script allocates."""
    rs = case.real_strides()
    if rs is not None:
        return rs[0 if side == "k" else 1]
    H, bs = case.H, case.bs
    W = (case.Dk + case.Dv) if case.packing == "packed" else \
        (case.Dk if side == "k" else case.Dv)
    if case.order == "nhd":  # [NB, bs, H, W]
        return (bs * H * W, H * W, W)
    return (bs * H * W, W, bs * W)  # hnd: [NB, H, bs, W]


def ref_base(case, side):
    return case.Dk if (side == "v" and case.packing == "packed") else 0


def head_size(case, side):
    return case.Dk if side == "k" else case.Dv


def side_extent(case, side, nb):
    """Elements from the side's first element to its last, plus one."""
    b, t, h = ref_strides(case, side)
    return ((nb - 1) * b + (case.bs - 1) * t + (case.H - 1) * h +
            ref_base(case, side) + head_size(case, side))


class Caches:
    """The cache buffers of one case: [lead canary | cache | slack canary]
    uint8 buffers, their expected copies, and where each side lives."""

    def __init__(self, X, case, nb, gen, slack):
        self.X, self.case, self.nb = X, case, nb
        es = ESIZE[case.dtype]
        self.slack = slack
        ek, ev = side_extent(case, "k", nb), side_extent(case, "v", nb)
        # buffers: name -> cache bytes; sides: side -> (buffer, byte offset)
        if case.packing == "packed":
            self.sizes = {"kv": max(ek, ev) * es}
            self.where = {"k": ("kv", 0), "v": ("kv", 0)}
        elif case.interleaved:
            voff = case.bs * case.H * case.Dk  # second half of block 0
            self.sizes = {"kv": max(ek, voff + ev) * es}
            self.where = {"k": ("kv", 0), "v": ("kv", voff * es)}
        else:
            self.sizes = {"k": ek * es, "v": ev * es}
            self.where = {"k": ("k", 0), "v": ("v", 0)}
        self.buf, self.exp = {}, {}
        for name, n in self.sizes.items():
            b = X.u8(LEAD + n + slack, CANARY)
            X.fill_random(gen, b[LEAD:LEAD + n])
            self.buf[name] = b
            self.exp[name] = X.clone(b)

    def arg(self, side):
        """The tensor passed as key_cache / value_cache: from the side's
        first byte to the end of the cache area."""
        name, off = self.where[side]
        return self.buf[name][LEAD + off:LEAD + self.sizes[name]]

    def args(self):
        kc = self.arg("k")
        vc = None if self.case.packing == "packed" else self.arg("v")
        return kc, vc

    def elems(self, side, expected=True):
        """The side's cache area (from its first element) as integer bits
        of the cache element type."""
        name, off = self.where[side]
        b = (self.exp if expected else self.buf)[name]
        return self.X.typed(b[LEAD + off:LEAD + self.sizes[name]],
                            self.case.dtype)

    def offsets(self, side, slots):
        """[n, H, D] element offsets (from the side's first element) of the
        rows of `slots` (int64, all valid)."""
        X, c = self.X, self.case
        b, t, h = ref_strides(c, side)
        D = head_size(c, side)
        blk = slots // c.bs
        tok = slots % c.bs
        row = blk * b + tok * t
        heads = X.arange(c.H) * h
        cols = X.arange(D) + ref_base(c, side)
        return (X.reshape(row, (-1, 1, 1)) + X.reshape(heads, (1, -1, 1)) +
                X.reshape(cols, (1, 1, -1)))

    def compare(self):
        """[] when every buffer equals its reference, else messages."""
        out = []
        for name, b in self.buf.items():
            e = self.exp[name]
            if self.X.equal(b, e):
                continue
            count, first = self.X.mismatch(b, e)
            n = self.sizes[name]
            region = ("lead canary" if first < LEAD else
                      "cache" if first < LEAD + n else "slack canary")
            out.append(f"buffer {name}: {count} bytes differ, first at byte "
                       f"{first - LEAD} of the cache ({region}; cache is "
                       f"{n} bytes): got {self.X.item(b[first:first + 1])}, "
                       f"want {self.X.item(e[first:first + 1])}")
        return out


def make_slots(case, T, nb, rng, caches):
    """(slots int64 numpy [T], list of out-of-range token indices).
    Distinct slots; the first two are the last and the first slot of the
    cache; tokens t % 7 == 3 are padding (-1)."""
    n = nb * case.bs
    if case.big:
        chosen = []
        es = ESIZE[case.dtype]
        for side in ("k", "v"):
            blk_bytes = ref_strides(case, side)[0] * es
            _, off = caches.where[side]
            for edge in (1 << 31, 1 << 32):
                b0 = (edge - off) // blk_bytes
                for b in (b0 - 1, b0, b0 + 1):
                    if 0 <= b < nb:
                        chosen.extend(range(b * case.bs, (b + 1) * case.bs))
        chosen.extend(range((nb - 2) * case.bs, n))
        chosen = list(dict.fromkeys(chosen))[:T]
        taken = set(chosen)
        extra = []
        while len(chosen) + len(extra) < T:
            for s in rng.integers(0, n, size=2 * T):
                s = int(s)
                if s not in taken:
                    taken.add(s)
                    extra.append(s)
                    if len(chosen) + len(extra) == T:
                        break
        slots = np.array(chosen + extra, np.int64)
        rng.shuffle(slots)
    else:
        first = [n - 1, 0][:min(T, 2)]
        rest = rng.choice(n - 2, size=T - len(first), replace=False) + 1
        slots = np.concatenate([np.array(first, np.int64),
                                rest.astype(np.int64)])
    if T > 3:
        slots[3::7] = -1
    oob = []
    if case.oob:
        huge = (1 << 31) - 1 if case.slots == "i32" else (1 << 40)
        cands = [5, 6] + list(range(16, T, 97))
        vals = [n, huge, n + 7 * case.bs]
        for i, t in enumerate(x for x in cands if x < T):
            slots[t] = vals[i % len(vals)]
            oob.append(t)
    return slots, oob


#---------------------------------------------------------------------------
# One case
#---------------------------------------------------------------------------

class Recorder:
    """Collects check results; each is also appended at once to
    `partial` (JSON lines), so a run cut short still leaves its results."""

    def __init__(self, partial=None):
        self.results = []
        self.partial = open(partial, "w") if partial else None

    def add(self, case, T, check, ok, detail="", group=None):
        r = {"group": group or case.group,
             "case": case if isinstance(case, str) else case.name,
             "T": T, "check": check, "ok": bool(ok), "detail": detail}
        self.results.append(r)
        if self.partial:
            self.partial.write(json.dumps(r) + "\n")
            self.partial.flush()
        if not ok:
            name = case if isinstance(case, str) else case.name
            print(f"FAIL {group or getattr(case, 'group', '')} {name} T={T} "
                  f"{check}: {detail}", flush=True)


def allbits_np(n, io, start):
    """n 16-bit patterns of io (bf16 or f16) counting up from `start`,
    wrapping, with each NaN pattern replaced by the infinity of its sign.
    NaN is left out because torch, the device reference, canonicalizes NaN
    (bf16 0x7fc0, e5m2 0x7f) where kvgen keeps the sign and uses ml_dtypes'
    encodings; the host grid checks kvgen's NaN bits against ml_dtypes."""
    b = ((np.arange(n, dtype=np.int64) + start) % 65536).astype(np.uint16)
    exp = np.uint16(0x7F80 if io == "bf16" else 0x7C00)
    nan = ((b & exp) == exp) & ((b & np.uint16(0x7FFF)) != exp)
    b[nan] = (b[nan] & np.uint16(0x8000)) | exp
    return b.view(np.int16)


def num_blocks_for(case, T):
    if case.num_blocks:
        return case.num_blocks
    return max(-(-3 * T // (2 * case.bs)), 2) + 2


def io_buffers(X, gen, case, T, dtype, misalign, random_bits):
    """(whole buffer, key view [T,H,Dk], value view [T,H,Dv], (key column,
    value column)) in dtype: slices of one fused [T, W] tensor
    (case.strided) or two tensors."""
    H, Dk, Dv = case.H, case.Dk, case.Dv
    make = (lambda shape: X.rand_typed(gen, shape, dtype)) if random_bits \
        else (lambda shape: X.randn(gen, shape, dtype))
    if case.allbits and not random_bits:
        starts = iter((0, 40000))  # K and V start at different patterns
        make = (lambda shape: X.allbits(shape, dtype, next(starts)))
    if case.strided:
        q = H * 8 + (1 if misalign else 0)  # a query part before K
        W = q + H * Dk + H * Dv + 5
        fused = make((T, W))
        return (fused, X.rows(fused, q, H, Dk),
                X.rows(fused, q + H * Dk, H, Dv), (q, q + H * Dk))
    k, v = make((T, H, Dk)), make((T, H, Dv))
    return (k, v), k, v, None


def snapshot(X, whole):
    if isinstance(whole, tuple):
        return tuple(X.clone(X.bits(w)) for w in whole)
    return X.clone(X.bits(whole))


def same(X, whole, snap):
    if isinstance(whole, tuple):
        return all(X.equal(X.bits(w), s) for w, s in zip(whole, snap))
    return X.equal(X.bits(whole), snap)


def run_case(ctx, X, case, T, seed, rec, slack):
    kernels = {}
    for role, spec in case.kernels().items():
        try:
            kernels[role] = ctx.kernel(spec.op, spec.layout, spec.io,
                                       spec.slots, spec.checked,
                                       spec.dequantize)
        except Exception as e:  # noqa: BLE001
            rec.add(case, T, f"kernel:{role}", False,
                    f"{type(e).__name__}: {e}")
    if "write" not in kernels:
        return
    gen = X.gen(seed)
    rng = np.random.default_rng(seed)
    nb = num_blocks_for(case, T)
    caches = Caches(X, case, nb, gen, slack)
    fp8 = case.dtype in FP8_DTYPES
    # scales
    ks = vs = None
    if fp8:
        n = case.H if case.scale_kind == "per_head" else 1
        ksn = rng.uniform(0.02, 0.5, n).astype(np.float32)
        vsn = rng.uniform(0.02, 0.5, n).astype(np.float32)
        ks, vs = X.floats(ksn), X.floats(vsn)
        bshape = (1, n, 1) if n > 1 else (1, 1, 1)
        ksb, vsb = X.reshape(ks, bshape), X.reshape(vs, bshape)
    # inputs
    whole_in, key, value, _ = io_buffers(X, gen, case, T, case.io,
                                         case.misalign, False)
    in_snap = snapshot(X, whole_in)
    slots_np, oob = make_slots(case, T, nb, rng, caches)
    n_slots = nb * case.bs
    slots_dev = X.upload(slots_np.astype(np.int32 if case.slots == "i32"
                                         else np.int64))
    valid_np = np.nonzero((slots_np >= 0) & (slots_np < n_slots))[0]
    vtok = X.upload(valid_np.astype(np.int64))
    vslots = X.upload(slots_np[valid_np].astype(np.int64))
    flag = X.zeros_i32(4) if case.checked else None
    dyn = None
    if case.dynamic:
        dyn = (ref_strides(case, "k"), ref_strides(case, "v"))
    kc, vc = caches.args()

    # -- reshape_and_cache
    try:
        kernels["write"].reshape_and_cache(
            key, value, kc, vc, slots_dev, k_scale=ks, v_scale=vs,
            num_blocks=nb, error_flag=flag, cache_strides=dyn)
        X.sync()
    except Exception as e:  # noqa: BLE001
        rec.add(case, T, "write", False, f"{type(e).__name__}: {e}")
        return
    for side, x, sc in (("k", key, ksb if fp8 else None),
                        ("v", value, vsb if fp8 else None)):
        rows = x[vtok]
        if fp8:
            vals = X.quantize(rows, sc, case.dtype)
        elif case.io == case.dtype:
            vals = X.bits(rows)
        else:
            vals = X.convert(rows, case.dtype)
        off = caches.offsets(side, vslots)
        ev = caches.elems(side)
        ev[off.reshape(-1)] = vals.reshape(-1)
    errs = caches.compare()
    rec.add(case, T, "write", not errs, "; ".join(errs))
    rec.add(case, T, "write:inputs_unchanged", same(X, whole_in, in_snap),
            "the key/value inputs were modified")
    if case.checked:
        got = X.item(flag)
        want = 1 if oob else 0
        rec.add(case, T, "write:error_flag", got == want,
                f"error_flag = {got}, want {want}")

    # -- gathers
    for role in ("gather", "gather_dq", "gather_cv"):
        if role not in kernels:
            continue
        k = kernels[role]
        spec = case.kernels()[role]
        whole_out, ko, vo, cols = io_buffers(X, gen, case, T, spec.io,
                                             False, True)
        exp_whole = snapshot(X, whole_out)
        if isinstance(whole_out, tuple):
            eko, evo = exp_whole
        else:
            eko = X.rows(exp_whole, cols[0], case.H, case.Dk)
            evo = X.rows(exp_whole, cols[1], case.H, case.Dv)
        if flag is not None:
            X.zero(flag)
        try:
            k.gather(kc, vc, slots_dev, ko, vo, k_scale=ks, v_scale=vs,
                     num_blocks=nb, error_flag=flag, cache_strides=dyn)
            X.sync()
        except Exception as e:  # noqa: BLE001
            rec.add(case, T, role, False, f"{type(e).__name__}: {e}")
            continue
        for side, eo, sc in (("k", eko, ksb if fp8 else None),
                             ("v", evo, vsb if fp8 else None)):
            off = caches.offsets(side, vslots)
            raw = caches.elems(side)[off.reshape(-1)].reshape(off.shape)
            if role == "gather":
                vals = raw
            elif role == "gather_dq":
                vals = X.encode(X.decode(raw, case.dtype) * sc, spec.io)
            else:
                vals = X.encode(X.decode(raw, case.dtype), spec.io)
            eo[vtok] = vals
        ok = same(X, whole_out, exp_whole)
        detail = ""
        if not ok:
            if isinstance(whole_out, tuple):
                parts = [(n, X.bits(w), e) for n, w, e in
                         zip(("key_out", "value_out"), whole_out, exp_whole)]
            else:
                parts = [("fused_out", X.bits(whole_out), exp_whole)]
            msgs = []
            for n, w, e in parts:
                if not X.equal(w, e):
                    count, first = X.mismatch(w, e)
                    row = first // math.prod(w.shape[1:])
                    msgs.append(f"{n}: {count} elements differ, first in "
                                f"token {row} (slot {int(slots_np[row])})")
            detail = "; ".join(msgs)
        rec.add(case, T, role, ok, detail)
        errs = caches.compare()
        rec.add(case, T, f"{role}:caches_unchanged", not errs,
                "; ".join(errs))
        if case.checked:
            got = X.item(flag)
            want = 1 if oob else 0
            rec.add(case, T, f"{role}:error_flag", got == want,
                    f"error_flag = {got}, want {want}")


FP8_DTYPES = tuple(FP8_MAX)


#---------------------------------------------------------------------------
# API checks: errors are raised with useful messages and nothing is written
#---------------------------------------------------------------------------

def api_checks(ctx, X, rec, slack):
    import kvgen
    case = next(c for c in G.grid_cases() if c.name == "mimo_b16")
    ks = case.kernels()
    write = ctx.kernel(ks["write"].op, ks["write"].layout, ks["write"].io)
    gather = ctx.kernel(ks["gather"].op, ks["gather"].layout,
                        ks["gather"].io)
    gen, rng = X.gen(7), np.random.default_rng(7)
    T, nb = 42, 8
    caches = Caches(X, case, nb, gen, slack)
    _, key, value, _ = io_buffers(X, gen, case, T, "bf16", False, False)
    slots = X.upload(rng.choice(nb * case.bs, T, replace=False)
                     .astype(np.int64))
    kc, vc = caches.args()
    kbytes = caches.sizes["k"]

    def expect(name, fn, exc, status=None, text=()):
        try:
            fn()
            X.sync()
        except exc as e:  # noqa: BLE001
            msg = str(e)
            ok = status is None or getattr(e, "status_name", None) == status
            ok = ok and all(t in msg for t in text)
            rec.add("api", T, name, ok, "" if ok else f"raised {msg!r}",
                    group="api")
        except Exception as e:  # noqa: BLE001
            rec.add("api", T, name, False, f"raised {type(e).__name__}: "
                    f"{e}, expected {exc.__name__}", group="api")
        else:
            rec.add("api", T, name, False, f"no error, expected "
                    f"{exc.__name__} {status or ''}", group="api")
        errs = caches.compare()
        rec.add("api", T, name + ":nothing_written", not errs,
                "; ".join(errs), group="api")

    extent = side_extent(case, "k", nb) * ESIZE[case.dtype]
    expect("k_cache_one_byte_short",
           lambda: write.reshape_and_cache(key, value, kc[:kbytes - 1], vc,
                                           slots, num_blocks=nb),
           kvgen.KvgenError, "KVGEN_ERROR_OUT_OF_BOUNDS", (str(extent),))
    expect("v_cache_short_gather",
           lambda: gather.gather(kc, vc[:-64], slots,
                                 X.clone(key), X.clone(value),
                                 num_blocks=nb),
           kvgen.KvgenError, "KVGEN_ERROR_OUT_OF_BOUNDS")
    if write.vector_bytes > 2:
        off = write.vector_bytes // 2
        expect("misaligned_k_cache",
               lambda: write.reshape_and_cache(
                   key, value, kc[off:], vc, slots, num_blocks=nb - 1),
               kvgen.KvgenError, "KVGEN_ERROR_MISALIGNED")
    expect("num_blocks_zero",
           lambda: write.reshape_and_cache(key, value, kc, vc, slots,
                                           num_blocks=0),
           kvgen.KvgenError, "KVGEN_ERROR_INVALID_ARGUMENT")
    expect("gather_kernel_as_write",
           lambda: gather.reshape_and_cache(key, value, kc, vc, slots),
           TypeError)
    expect("wrong_slot_dtype",
           lambda: write.reshape_and_cache(
               key, value, kc, vc, X.upload(np.zeros(T, np.int32))),
           TypeError)
    expect("wrong_key_shape",
           lambda: write.reshape_and_cache(value, key, kc, vc, slots),
           ValueError)
    # A launch with T = 0 does nothing.
    try:
        write.reshape_and_cache(key[:0], value[:0], kc, vc, slots[:0])
        X.sync()
        errs = caches.compare()
        rec.add("api", 0, "empty_launch", not errs, "; ".join(errs),
                group="api")
    except Exception as e:  # noqa: BLE001
        rec.add("api", 0, "empty_launch", False, repr(e), group="api")
    # fp8: missing scale (binding), and NULL scale through the raw C API.
    fcase = next(c for c in G.grid_cases() if c.name == "checked_oob_e4m3")
    fk = fcase.kernels()["write"]
    fw = ctx.kernel(fk.op, fk.layout, fk.io, fk.slots, fk.checked)
    fc = Caches(X, fcase, nb, gen, slack)
    fkc, fvc = fc.args()
    flag = X.zeros_i32(1)
    try:
        fw.reshape_and_cache(key, value, fkc, fvc, slots, num_blocks=nb,
                             error_flag=flag)
        rec.add("api", T, "fp8_missing_scale", False, "no error",
                group="api")
    except ValueError as e:
        rec.add("api", T, "fp8_missing_scale", "k_scale" in str(e), str(e),
                group="api")
    import kvgen._capi as capi
    ptr = (lambda t: t.data_ptr()) if X.name == "torch" else \
        (lambda t: t.ctypes.data)
    a = capi.ReshapeAndCacheArgs(
        key=ptr(key), value=ptr(value), key_cache=ptr(fkc),
        value_cache=ptr(fvc), slot_mapping=ptr(slots), k_scale=None,
        v_scale=None, error_flag=ptr(flag), num_tokens=T, num_blocks=nb,
        key_stride_token=case.H * case.Dk, key_stride_head=case.Dk,
        value_stride_token=case.H * case.Dv, value_stride_head=case.Dv)
    try:
        fw.launch_raw(a, fc.sizes["k"], fc.sizes["v"], 0)
        rec.add("api", T, "c_api_null_scale", False, "no error", group="api")
    except kvgen.KvgenError as e:
        rec.add("api", T, "c_api_null_scale",
                e.status_name == "KVGEN_ERROR_INVALID_ARGUMENT" and
                "k_scale" in e.message, str(e), group="api")
    errs = fc.compare()
    rec.add("api", T, "c_api_null_scale:nothing_written", not errs,
            "; ".join(errs), group="api")
    # A launch on a side stream (torch): the default stream of the binding
    # is torch's current stream.
    if X.name == "torch":
        torch = X.torch
        s = torch.cuda.Stream(device=X.dev)
        c2 = Caches(X, case, nb, gen, slack)
        k2, v2 = c2.args()
        vt = X.arange(T)
        s.wait_stream(torch.cuda.current_stream(X.dev))
        with torch.cuda.stream(s):
            write.reshape_and_cache(key, value, k2, v2, slots, num_blocks=nb)
        s.synchronize()
        for side, x in (("k", key), ("v", value)):
            off = c2.offsets(side, slots)
            c2.elems(side)[off.reshape(-1)] = X.bits(x[vt]).reshape(-1)
        errs = c2.compare()
        rec.add("api", T, "side_stream_write", not errs, "; ".join(errs),
                group="api")


#---------------------------------------------------------------------------

def select_cases(args):
    cases = G.grid_cases()
    if args.only:
        cases = [c for c in cases if re.search(args.only, c.name)]
    out = []
    for c in cases:
        Ts = c.Ts
        if args.subset == "memcheck":
            if not c.memcheck:
                continue
            Ts = tuple(t for t in Ts if t <= 300)[:2] or (7,)
        elif args.subset == "small":
            if c.big:
                continue
            Ts = tuple(t for t in Ts if t <= args.max_t)
            if not Ts:
                continue
        out.append((c, Ts))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", default=str(G.DEFAULT_BUNDLE))
    ap.add_argument("--lib", help="libkvgen-runtime.so (sets KVGEN_LIB)")
    ap.add_argument("--out", default="out/grid")
    ap.add_argument("--backend", default="cuda", choices=("cuda", "host"),
                    help="host: numpy reference + host kernels (a bundle "
                    "emitted with --target host)")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--subset", default="all",
                    choices=("all", "memcheck", "small"))
    ap.add_argument("--max-t", type=int, default=4096,
                    help="largest T of --subset small")
    ap.add_argument("--only", help="regex on case names")
    ap.add_argument("--slack", type=int, default=None,
                    help="canary bytes after each cache (default 4096; 0 "
                    "under compute-sanitizer so that overruns hit the end "
                    "of the allocation)")
    ap.add_argument("--no-api", action="store_true")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    if args.lib:
        os.environ["KVGEN_LIB"] = str(Path(args.lib).resolve())
    slack = args.slack if args.slack is not None else (
        0 if args.subset == "memcheck" else 4096)
    import kvgen
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    X = TorchX(args.device) if args.backend == "cuda" else NumpyX()
    ctx = kvgen.Context(args.backend, device=args.device)
    ctx.load_bundle(args.bundle)
    print(f"kvgen {kvgen.version()} from {kvgen.library_path()}; backend "
          f"{ctx.backend}, target {ctx.target}, cache {ctx.cache_dir!r}",
          flush=True)
    rec = Recorder(out / "grid_results.partial.jsonl")
    t0 = time.time()
    timings = []
    for i, (case, Ts) in enumerate(select_cases(args)):
        for T in Ts:
            t1 = time.time()
            try:
                run_case(ctx, X, case, T, args.seed + 1000 * i + T, rec,
                         slack)
            except Exception as e:  # noqa: BLE001
                rec.add(case, T, "exception", False,
                        f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
            timings.append({"case": case.name, "T": T,
                            "s": round(time.time() - t1, 4)})
            if case.big:
                X.free()
    if not args.no_api and args.subset != "memcheck":
        try:
            api_checks(ctx, X, rec, slack)
        except Exception as e:  # noqa: BLE001
            rec.add("api", 0, "exception", False,
                    f"{type(e).__name__}: {e}\n{traceback.format_exc()}",
                    group="api")
    wall = time.time() - t0
    res = rec.results
    groups = {}
    for r in res:
        g = groups.setdefault(r["group"], [0, 0])
        g[0 if r["ok"] else 1] += 1
    passed = sum(g[0] for g in groups.values())
    failed = sum(g[1] for g in groups.values())
    stats = ctx.stats()
    summary = {"passed": passed, "failed": failed, "wall_s": round(wall, 2),
               "groups": {k: {"passed": v[0], "failed": v[1]}
                          for k, v in sorted(groups.items())},
               "backend": ctx.backend, "target": ctx.target,
               "subset": args.subset, "kernel_cache": stats,
               "library": kvgen.library_path()}
    (out / "grid_results.json").write_text(json.dumps(
        {"summary": summary, "results": res, "timings": timings}, indent=1))
    lines = [f"kvgen device grid ({args.subset}) on {ctx.target}: "
             f"{passed} passed, {failed} failed in {wall:.1f} s",
             f"kernel cache: {stats}", "", f"{'group':14s} passed failed"]
    for k, v in sorted(groups.items()):
        lines.append(f"{k:14s} {v[0]:6d} {v[1]:6d}")
    lines.append(f"{'total':14s} {passed:6d} {failed:6d}")
    if failed:
        lines += ["", "failures:"]
        lines += [f"  {r['group']} {r['case']} T={r['T']} {r['check']}: "
                  f"{r['detail'].splitlines()[0] if r['detail'] else ''}"
                  for r in res if not r["ok"]]
    (out / "grid_summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[2:]))
    print(f"{passed} passed, {failed} failed")
    ctx.close()
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
