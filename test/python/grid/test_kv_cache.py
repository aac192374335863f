"""Bit-exact grid tests of kvgen's emitted kernels on the host target.

Each kernel is generated with `kvgen-opt --kv-plan=target=host
--convert-kv-to-emitc | kvgen-translate --mlir-to-kernel-source`,
compiled into a shared library with the system C++ compiler and called via
ctypes with a `kvgen_reshape_and_cache_args` / `kvgen_gather_args` struct
(runtime/include/kvgen/kernel_abi.h). Results are compared bit for bit with
the independent numpy reference in kvgen_ref.py:

* caches live in buffers with canary bytes before and after; the whole
  buffer (canaries, unwritten slots, padding between rows/blocks) must equal
  the reference, i.e. only the rows named by slots may change;
* inputs are strided views (fused qkv rows, padded head strides, misaligned
  views that force the one-element path) and must not be modified;
* gather outputs are strided views into pre-filled buffers: rows of padding
  slots and the gaps between rows stay untouched;
* reshape_and_cache -> raw gather round-trips exactly; gather with
  dequantize is checked against q * scale.

Run:  python3 -m pytest -q test/python/test_host_grid.py
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import mmap
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import pytest

import kvgen_ref as R
from kvgen_ref import Buffer, Layout

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import kvgen  # noqa: E402  (the binding: its argument structs)

REPO_ROOT = Path(__file__).resolve().parents[2]
CXX = os.environ.get("CXX") or shutil.which("c++") or "g++"
CXXFLAGS = ["-O2", "-std=c++17", "-shared", "-fPIC", "-Werror"]
# UndefinedBehaviorSanitizer checks added to the kernel builds (when the
# compiler supports them; KVGEN_TEST_UBSAN=0 turns them off). Above all
# `alignment`: a vector access taken on a misaligned row is a fault on GPUs
# but silently works on x86, so without it the host could not see one.
UBSAN = ["-fsanitize=alignment,null,signed-integer-overflow,shift,"
         "pointer-overflow,bool,enum,return,unreachable"]

# ---------------------------------------------------------------------------
# C ABI: the binding's structs, built from the runtime's op table
# (kvgen/Ops.def); no hand copies.
# ---------------------------------------------------------------------------


def RCArgs():
    return kvgen._capi.args_struct("reshape_and_cache")()


def GArgs():
    return kvgen._capi.args_struct("gather")()


# ---------------------------------------------------------------------------
# Kernel specs, generation and compilation (cached per session)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    op: str  # "w" (reshape_and_cache) or "g" (gather)
    layout: Layout
    io: str  # input type (w) / output type (g)
    slots: str = "i64"
    dequantize: bool = False
    checked: bool = False

    @property
    def name(self) -> str:
        h = hashlib.sha1(repr((self.layout, self.io)).encode()).hexdigest()[:12]
        flags = ("d" if self.dequantize else "") + ("c" if self.checked else "")
        return f"k{self.op}{flags}_{self.slots}_{self.io}_{h}"

    def mlir(self) -> str:
        lay = self.layout.mlir()
        if self.op == "w":
            s = f"kv.reshape_and_cache @{self.name} : {lay}, input {self.io}, slots {self.slots}"
        else:
            s = f"kv.gather @{self.name} : {lay}, output {self.io}, slots {self.slots}"
            if self.dequantize:
                s += " dequantize"
        if self.checked:
            s += " checked"
        return s


class CaptureStderr:
    """Redirects file descriptor 2 (where UBSan reports) into a file."""

    def __enter__(self):
        self.tmp = tempfile.TemporaryFile()
        self.saved = os.dup(2)
        os.dup2(self.tmp.fileno(), 2)
        return self

    def __exit__(self, *exc):
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.tmp.seek(0)
        self.text = self.tmp.read().decode(errors="replace")
        self.tmp.close()
        return False


@dataclass
class Kernel:
    spec: Spec
    fn: object
    threads: int
    tokens_per_cta: int
    vector_bytes: int
    small_max_tokens: int = 0
    small_threads: int = 0
    sanitized: bool = False

    def shape(self, num_tokens: int):
        """(grid.x, block.x), the rule of the kernel header line."""
        if 0 < num_tokens <= self.small_max_tokens:
            return num_tokens, self.small_threads
        return -(-num_tokens // self.tokens_per_cta), self.threads

    def launch(self, args, num_tokens: int) -> None:
        grid, block = self.shape(num_tokens)
        if not self.sanitized:
            self.fn(ctypes.byref(args), grid, block)
            return
        with CaptureStderr() as cap:
            self.fn(ctypes.byref(args), grid, block)
        if "runtime error" in cap.text:
            raise AssertionError(f"UBSan report from kernel {self.spec.name}:\n"
                                 f"{cap.text[:3000]}")


HEADER_RE = re.compile(
    r"^// kvgen-kernel: name=(\S+) threads=(\d+) tokens_per_cta=(\d+) "
    r"vector_bytes=(\d+) small_max_tokens=(\d+) small_threads=(\d+) "
    r"grid=\(num_tokens<=small_max_tokens \? num_tokens x small_threads : "
    r"ceil\(num_tokens/tokens_per_cta\) x threads\)$", re.M)


class KernelCache:
    def __init__(self, tool: Path, workdir: Path):
        self.tool = tool
        self.workdir = workdir
        self.kernels: Dict[Spec, Kernel] = {}
        self.lock = threading.Lock()
        self.libs = []  # keep CDLLs alive
        self.sanitize = os.environ.get("KVGEN_TEST_UBSAN", "1") != "0" and self._probe()

    def _probe(self) -> bool:
        src = self.workdir / "ubsan_probe.cpp"
        src.write_text('extern "C" int f(int *p) { return *p; }\n')
        r = subprocess.run([CXX, *CXXFLAGS, *UBSAN, str(src), "-o",
                            str(self.workdir / "ubsan_probe.so")], capture_output=True)
        return r.returncode == 0

    def _build(self, specs: List[Spec]) -> Dict[Spec, Kernel]:
        text = "\n".join(s.mlir() for s in specs) + "\n"
        key = hashlib.sha1(text.encode()).hexdigest()[:16]
        mlir = self.workdir / f"{key}.mlir"
        cpp = self.workdir / f"{key}.cpp"
        so = self.workdir / f"{key}.so"
        mlir.write_text(text)
        opt = self.tool.parent / "kvgen-opt"
        r = subprocess.run([str(opt), "--kv-plan=target=host",
                            "--convert-kv-to-emitc", str(mlir)],
                           capture_output=True, text=True)
        if r.returncode == 0:
            r = subprocess.run([str(self.tool), "--mlir-to-kernel-source"],
                               input=r.stdout, capture_output=True, text=True)
        if r.returncode != 0:
            raise AssertionError(f"kvgen-translate failed ({r.returncode}):\n"
                                 f"{r.stderr[-4000:]}\ninput:\n{text}")
        cpp.write_text(r.stdout)
        header = {m.group(1): tuple(int(m.group(i)) for i in (2, 3, 4, 5, 6))
                  for m in HEADER_RE.finditer(r.stdout)}
        flags = CXXFLAGS + (UBSAN if self.sanitize else [])
        r = subprocess.run([CXX, *flags, str(cpp), "-o", str(so)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise AssertionError(f"host compile of {cpp} failed:\n{r.stderr[-4000:]}")
        lib = ctypes.CDLL(str(so))
        out = {}
        for s in specs:
            assert s.name in header, f"no kvgen-kernel header line for {s.name}"
            threads, tpc, vb, smax, sthreads = header[s.name]
            assert threads > 0 and tpc > 0 and vb > 0
            assert (smax > 0) == (sthreads > 0)
            fn = getattr(lib, s.name + "_host_launch")
            fn.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
            fn.restype = None
            out[s] = Kernel(s, fn, threads, tpc, vb, smax, sthreads,
                            self.sanitize)
        with self.lock:
            self.libs.append(lib)
        return out

    def get(self, specs: List[Spec]) -> Dict[Spec, Kernel]:
        with self.lock:
            missing = [s for s in dict.fromkeys(specs) if s not in self.kernels]
        if missing:
            built = self._build(missing)
            with self.lock:
                self.kernels.update(built)
        with self.lock:
            return {s: self.kernels[s] for s in specs}


def group_specs(layout: Layout, io: str) -> List[Spec]:
    """Every kernel a test of (layout, io) may use; compiled as one TU."""
    c = layout.dtype
    specs = []
    for sl in ("i64", "i32"):
        specs += [Spec("w", layout, io, sl), Spec("g", layout, c, sl),
                  Spec("g", layout, io, sl, dequantize=True)]
    specs += [Spec("w", layout, io, "i64", checked=True),
              Spec("w", layout, io, "i32", checked=True),
              Spec("g", layout, c, "i64", checked=True),
              Spec("g", layout, io, "i32", dequantize=True, checked=True)]
    return specs


@pytest.fixture(scope="session")
def kcache(kvgen_translate, kvgen_session_dir):
    return KernelCache(kvgen_translate, kvgen_session_dir)


class Group:
    def __init__(self, kc: KernelCache, layout: Layout, io: str):
        self.layout, self.io = layout, io
        self.k = kc.get(group_specs(layout, io))

    def write(self, slots="i64", checked=False) -> Kernel:
        return self.k[Spec("w", self.layout, self.io, slots, False, checked)]

    def gather(self, slots="i64", dequantize=False, checked=False) -> Kernel:
        out = self.io if dequantize else self.layout.dtype
        return self.k[Spec("g", self.layout, out, slots, dequantize, checked)]


_GROUP_PARAMS = ("layout", "io")


@pytest.fixture(scope="module", autouse=True)
def _prebuild(request, kvgen_translate, kcache):
    """Compiles the kernel groups of the selected tests of this module in
    parallel (one translation unit per (layout, io))."""
    keys = []
    for item in request.session.items:
        if item.module is not request.module or not hasattr(item, "callspec"):
            continue
        p = item.callspec.params
        if isinstance(p.get("layout"), Layout):
            keys.append((p["layout"], p.get("io", "bf16")))
    keys = list(dict.fromkeys(keys))
    def build(key):
        try:
            kcache.get(group_specs(*key))
        except Exception:  # reported by the test that needs the group
            pass

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as ex:
        list(ex.map(build, keys))


# ---------------------------------------------------------------------------
# Test fixtures: caches, inputs, outputs, slots, scales
# ---------------------------------------------------------------------------


def seed_of(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


class Cache:
    """A cache allocation for `layout`: buffers with canaries, the strides
    actually used, and the pointers passed to the kernel. For a packed
    layout value_cache points at a decoy buffer by default (the ABI says it
    is ignored); packed_value_cache="same" passes key_cache instead."""

    def __init__(self, layout: Layout, num_blocks: int, rng, dyn=None,
                 v_offset: Optional[int] = None, post: int = 256,
                 packed_value_cache: str = "decoy"):
        self.layout, self.nb = layout, num_blocks
        self.isz = R.dt(layout.dtype).size
        self.strides, self.arg_strides = {}, {}
        for side in "kv":
            decl = layout.declared_strides(side)
            eff = tuple(d if d is not None else dyn[side][i] for i, d in enumerate(decl))
            self.strides[side] = eff
            self.arg_strides[side] = [e if d is None else 0 for d, e in zip(decl, eff)]
        ext = {s: R.side_extent(layout, s, num_blocks, self.strides[s]) for s in "kv"}
        self.offs = {"k": 0, "v": 0}
        if layout.packed or v_offset is not None:
            if v_offset is not None:
                self.offs["v"] = v_offset
                ext["v"] += v_offset
            buf = Buffer(max(ext.values()) * self.isz, rng, post=post)
            self.bufs = {"k": buf, "v": buf}
        else:
            self.bufs = {s: Buffer(ext[s] * self.isz, rng, post=post) for s in "kv"}
        self.distinct = list({id(b): b for b in self.bufs.values()}.values())
        self.snapshots = [b.snapshot() for b in self.distinct]
        # Reference bodies (copies), shared where the buffers are shared.
        self.ref = {}
        copies = {id(b): b.body().copy() for b in self.distinct}
        for s in "kv":
            self.ref[s] = copies[id(self.bufs[s])]
        self.decoy = None
        if layout.packed:
            if packed_value_cache == "same":
                self.value_ptr = self.bufs["k"].ptr
            elif packed_value_cache == "decoy":
                self.decoy = Buffer(self.bufs["k"].nbytes, rng, post=post)
                self.decoy_snapshot = self.decoy.snapshot()
                self.value_ptr = self.decoy.ptr
            else:
                raise ValueError(packed_value_cache)
        else:
            self.value_ptr = self.bufs["v"].ptr + self.offs["v"] * self.isz
        self.key_ptr = self.bufs["k"].ptr

    @property
    def limit(self) -> int:
        return self.nb * self.layout.block_size

    def view(self, side: str, ref: bool = False) -> np.ndarray:
        body = self.ref[side] if ref else self.bufs[side].body()
        return R.cache_side_view(self.layout, side, body, self.nb,
                                 self.strides[side], self.offs[side])

    def fill_args(self, a) -> None:
        a.key_cache = self.key_ptr
        a.value_cache = self.value_ptr
        a.num_blocks = self.nb
        for i in range(3):
            a.k_cache_strides[i] = self.arg_strides["k"][i]
            a.v_cache_strides[i] = self.arg_strides["v"][i]

    def check(self, what: str, strict: bool = False) -> None:
        """The whole cache (all buffers) equals the reference, canaries too.
        strict: bit for bit even for NaNs (raw copies, untouched caches)."""
        st = R.dt(self.layout.dtype).storage
        for b, snap in zip(self.distinct, self.snapshots):
            assert b.canaries_intact(snap), f"{what}: canary bytes around the cache were overwritten"
            ref = self.ref["k"] if b is self.bufs["k"] else self.ref["v"]
            R.assert_bits_equal(f"{what}: cache buffer", b.body().view(st), ref.view(st),
                                self.layout.dtype, strict)
        if self.decoy is not None:
            assert np.array_equal(self.decoy.raw, self.decoy_snapshot), (
                f"{what}: the kernel wrote to value_cache, which a packed layout must ignore")

    def resnapshot(self) -> None:
        self.snapshots = [b.snapshot() for b in self.distinct]

    def adopt(self) -> None:
        """After a passing check: take the actual contents as the reference
        (they differ at most in NaN encodings), so later checks are strict."""
        for s in "kv":
            self.ref[s][...] = self.bufs[s].body()


class Rows:
    """[T, H, D] K and V views of element type `dtype` inside buffers.

    mode: dense | fused (one qkv buffer, token stride > H*D) | padded (head
    stride D+8) | misaligned (odd strides and offset: one-element path)."""

    def __init__(self, T: int, layout: Layout, dtype: str, mode: str, rng):
        d = R.dt(dtype)
        H, D = layout.heads, {"k": layout.hk, "v": layout.hv}
        self.dtype, self.T = dtype, T
        self.ptr, self.stride, self.views, self.bufs, self.offs = {}, {}, {}, {}, {}
        if mode == "fused":
            hq = 2 * H
            row = hq * D["k"] + H * D["k"] + H * D["v"]
            buf = Buffer(T * row * d.size, rng)
            offs = {"k": hq * D["k"], "v": hq * D["k"] + H * D["k"]}
            for s in "kv":
                self.bufs[s], self.offs[s] = buf, offs[s]
                self.stride[s] = (row, D[s])
        else:
            for s in "kv":
                if mode == "dense":
                    hs, ts, off = D[s], H * D[s], 0
                elif mode == "padded":
                    hs, ts, off = D[s] + 8, H * (D[s] + 8) + 16, 0
                elif mode == "misaligned":
                    hs, ts, off = D[s] + 1, H * (D[s] + 1) + 3, 1
                else:
                    raise ValueError(mode)
                n = off + (T - 1) * ts + (H - 1) * hs + D[s]
                self.bufs[s] = Buffer(n * d.size, rng)
                self.offs[s], self.stride[s] = off, (ts, hs)
        for s in "kv":
            self.views[s] = R.strided_view(self.bufs[s].body(), d.storage, self.offs[s],
                                           (T, H, D[s]), (*self.stride[s], 1))
            self.ptr[s] = self.bufs[s].ptr + self.offs[s] * d.size
        self.distinct = list({id(b): b for b in self.bufs.values()}.values())
        self.ref = {id(b): b.body().copy() for b in self.distinct}

    def ref_view(self, s: str) -> np.ndarray:
        d = R.dt(self.dtype)
        return R.strided_view(self.ref[id(self.bufs[s])], d.storage, self.offs[s],
                              self.views[s].shape, (*self.stride[s], 1))

    def snapshot(self) -> None:
        self.snaps = [b.snapshot() for b in self.distinct]

    def unchanged(self) -> bool:
        return all(np.array_equal(b.raw, s) for b, s in zip(self.distinct, self.snaps))

    def check(self, what: str, strict: bool = False) -> None:
        st = R.dt(self.dtype).storage
        for b, snap in zip(self.distinct, self.snaps):
            assert b.canaries_intact(snap), f"{what}: canary bytes around the output were overwritten"
            R.assert_bits_equal(what, b.body().view(st), self.ref[id(b)].view(st), self.dtype,
                                strict)


def input_values(shape, rng, cache_dtype: str) -> np.ndarray:
    """float32 values: mostly moderate, some that saturate fp8 after scaling,
    some tiny (fp8 subnormals), and a few +-inf / NaN / +-0."""
    x = (rng.standard_normal(shape) * 3.0).astype(np.float32)
    u = rng.random(shape)
    cd = R.dt(cache_dtype)
    big = cd.max_finite * 8.0 if cd.is_fp8 else 3.0e4
    x = np.where(u < 0.03, x * np.float32(big / 3.0), x)
    x = np.where((u >= 0.03) & (u < 0.06), x * np.float32(1e-3), x)
    specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30], np.float32)
    sp = u > 0.995
    x[sp] = rng.choice(specials, size=int(sp.sum()))
    return x.astype(np.float32)


def fill_inputs(rows: Rows, layout: Layout, rng) -> None:
    for s in "kv":
        v = input_values(rows.views[s].shape, rng, layout.dtype)
        bits = R.from_f32(v, rows.dtype)
        rows.views[s][...] = bits
        rows.ref_view(s)[...] = bits
    rows.snapshot()


def make_scales(layout: Layout, rng):
    """{'k': float32 scales or None, 'v': ...}: 1 (per_tensor) or one per
    kv head (per_head), random in [0.05, 2)."""
    if layout.scale == "none":
        return {"k": None, "v": None}
    n = layout.heads if layout.scale == "per_head" else 1
    return {s: rng.uniform(0.05, 2.0, n).astype(np.float32) for s in "kv"}


NO_SCALES = {"k": None, "v": None}


def scale_ptr(a: Optional[np.ndarray]):
    return None if a is None else a.ctypes.data


def make_slots(T: int, cache: Cache, rng, dtype: str, pad_frac=0.15,
               extra_negative=True) -> np.ndarray:
    s = rng.choice(cache.limit, size=T, replace=False).astype(np.int64)
    if T > 1:
        pad = rng.random(T) < pad_frac
        pad[rng.integers(T)] = True  # at least one padding slot
        s[pad] = -1
        if extra_negative and T > 4:
            s[0 if s[0] < 0 else np.argmax(s < 0)] = -(2 ** 31) if dtype == "i32" else -(2 ** 40)
    return s.astype(np.int64 if dtype == "i64" else np.int32)


def num_blocks_for(T: int, bs: int) -> int:
    return max(2, -(-T * 5 // (4 * bs)) + 1)


# ---------------------------------------------------------------------------
# Running kernels and the reference
# ---------------------------------------------------------------------------


def do_write(kernel: Kernel, cache: Cache, rows: Rows, slots: np.ndarray,
             scales, flag: Optional[np.ndarray] = None) -> None:
    a = RCArgs()
    a.key, a.value = rows.ptr["k"], rows.ptr["v"]
    cache.fill_args(a)
    a.slot_mapping = slots.ctypes.data
    a.k_scale, a.v_scale = scale_ptr(scales["k"]), scale_ptr(scales["v"])
    a.error_flag = None if flag is None else flag.ctypes.data
    a.num_tokens = len(slots)
    a.key_stride_token, a.key_stride_head = rows.stride["k"]
    a.value_stride_token, a.value_stride_head = rows.stride["v"]
    kernel.launch(a, len(slots))


def do_gather(kernel: Kernel, cache: Cache, out: Rows, slots: np.ndarray,
              scales, flag: Optional[np.ndarray] = None) -> None:
    a = GArgs()
    cache.fill_args(a)
    a.slot_mapping = slots.ctypes.data
    a.k_scale, a.v_scale = scale_ptr(scales["k"]), scale_ptr(scales["v"])
    a.error_flag = None if flag is None else flag.ctypes.data
    a.key_out, a.value_out = out.ptr["k"], out.ptr["v"]
    a.num_tokens = len(slots)
    a.key_out_stride_token, a.key_out_stride_head = out.stride["k"]
    a.value_out_stride_token, a.value_out_stride_head = out.stride["v"]
    kernel.launch(a, len(slots))


def ref_write(cache: Cache, rows: Rows, slots, scales, limit=None) -> Dict[str, np.ndarray]:
    """Applies the reference write; returns the cache-typed rows per side."""
    lay = cache.layout
    conv = {}
    for s in "kv":
        sc = R.scale_for_rows(scales[s], lay.scale, lay.heads)
        conv[s] = R.input_to_cache(np.ascontiguousarray(rows.views[s]), rows.dtype,
                                   lay.dtype, sc)
        R.ref_reshape_and_cache(cache.view(s, ref=True), conv[s], slots,
                                lay.block_size, limit)
    return conv


def ref_gather(cache: Cache, out: Rows, slots, scales, dequantize: bool, limit=None) -> None:
    lay = cache.layout
    for s in "kv":
        sc = R.scale_for_rows(scales[s], lay.scale, lay.heads)
        fn = (lambda c, sc=sc: R.cache_to_output(c, lay.dtype, out.dtype, dequantize, sc))
        R.ref_gather(out.ref_view(s), fn, cache.view(s, ref=True), slots,
                     lay.block_size, limit)


OUT_MODE = {"dense": "dense", "fused": "padded", "padded": "padded",
            "misaligned": "misaligned"}


def run_roundtrip(g: Group, T: int, in_mode: str, slot_t: str, seed: int,
                  cache_kw=None, num_blocks=None, out_mode=None) -> None:
    """reshape_and_cache, raw gather of the same slots, dequantizing gather of
    other slots; every step checked bit-exactly against the reference."""
    lay, io = g.layout, g.io
    rng = np.random.default_rng(seed)
    nb = num_blocks or num_blocks_for(T, lay.block_size)
    cache = Cache(lay, nb, rng, **(cache_kw or {}))
    rows = Rows(T, lay, io, in_mode, rng)
    fill_inputs(rows, lay, rng)
    scales = make_scales(lay, rng)
    slots = make_slots(T, cache, rng, slot_t)

    # 1. reshape_and_cache (raw bits when the input type is the cache type).
    do_write(g.write(slot_t), cache, rows, slots, scales)
    conv = ref_write(cache, rows, slots, scales)
    assert rows.unchanged(), "reshape_and_cache modified its key/value inputs"
    cache.check("reshape_and_cache", strict=io == lay.dtype)
    cache.adopt()

    # 2. Raw gather of the same slots: exactly what was stored. Raw gathers
    #    need no scales: pass NULL.
    out_mode = out_mode or OUT_MODE[in_mode]
    out = Rows(T, lay, lay.dtype, out_mode, rng)
    out.snapshot()
    cache.resnapshot()
    do_gather(g.gather(slot_t), cache, out, slots, NO_SCALES)
    ref_gather(cache, out, slots, scales, dequantize=False)
    out.check("raw gather output", strict=True)
    cache.check("raw gather (cache must stay unchanged)", strict=True)
    valid = np.asarray(slots) >= 0
    for s in "kv":  # Round trip against the stored rows, independently of views.
        got = np.ascontiguousarray(out.views[s])[valid]
        R.assert_bits_equal(f"round trip {s.upper()}", got, conv[s][valid], lay.dtype)
        if io == lay.dtype:
            R.assert_bits_equal(f"round trip {s.upper()} vs input", got,
                                np.ascontiguousarray(rows.views[s])[valid], io, strict=True)

    # 3. Dequantizing gather over the whole cache (written and unwritten
    #    slots, padding), into the I/O type.
    slots2 = make_slots(T, cache, rng, slot_t)
    out2 = Rows(T, lay, io, out_mode, rng)
    out2.snapshot()
    do_gather(g.gather(slot_t, dequantize=True), cache, out2, slots2, scales)
    ref_gather(cache, out2, slots2, scales, dequantize=True)
    out2.check("dequantizing gather output",
               strict=io == lay.dtype)  # bf16 -> bf16 'dequantize' is a raw copy
    cache.check("dequantizing gather (cache must stay unchanged)", strict=True)


# ---------------------------------------------------------------------------
# The grids
# ---------------------------------------------------------------------------

MIMO_DTYPES = [("bf16", "none"), ("f8E4M3FN", "per_tensor"), ("f8E4M3FN", "per_head"),
               ("f8E4M3FNUZ", "per_tensor"), ("f8E4M3FNUZ", "per_head"),
               ("f8E5M2", "per_tensor"), ("f8E5M2", "per_head")]
ARRANGEMENTS = [("nhd", "separate"), ("hnd", "separate"), ("nhd", "packed"),
                ("hnd", "packed")]
MIMO_LAYOUTS = [Layout(4, 192, 128, bs, o, p, d, sc)
                for bs in (16, 64) for (o, p) in ARRANGEMENTS for (d, sc) in MIMO_DTYPES]

# (num_tokens, input view, slot type)
MIMO_CASES = [(1, "dense", "i64"), (7, "fused", "i32"), (42, "padded", "i64"),
              (42, "misaligned", "i32"), (300, "fused", "i64")]


def lid(layout: Layout) -> str:
    return layout.short()


@pytest.mark.parametrize("case", MIMO_CASES, ids=lambda c: f"T{c[0]}-{c[1]}-{c[2]}")
@pytest.mark.parametrize("layout", MIMO_LAYOUTS, ids=lid)
def test_mimo_grid(kcache, layout, case):
    T, mode, slot_t = case
    run_roundtrip(Group(kcache, layout, "bf16"), T, mode, slot_t,
                  seed_of("mimo", layout, case))


# Other geometries: symmetric 8x128, odd head sizes, MLA-like 576 packed row,
# other block sizes, e5m2fnuz.
OTHER_LAYOUTS = [
    Layout(8, 128, 128, 16, "nhd", "separate", "bf16", "none"),
    Layout(8, 128, 128, 16, "hnd", "separate", "f8E4M3FN", "per_head"),
    Layout(8, 128, 128, 32, "nhd", "packed", "f8E5M2", "per_tensor"),
    Layout(8, 64, 64, 128, "hnd", "separate", "bf16", "none"),
    Layout(2, 80, 80, 16, "nhd", "separate", "bf16", "none"),
    Layout(2, 80, 80, 16, "hnd", "packed", "f8E4M3FN", "per_head"),
    Layout(2, 46, 46, 16, "nhd", "separate", "bf16", "none"),
    Layout(2, 46, 46, 16, "hnd", "separate", "f8E4M3FNUZ", "per_tensor"),
    Layout(2, 46, 46, 8, "nhd", "packed", "f8E5M2", "per_head"),
    Layout(3, 80, 46, 16, "nhd", "separate", "f8E4M3FN", "per_head"),
    Layout(3, 46, 80, 16, "hnd", "packed", "bf16", "none"),
    Layout(1, 512, 64, 64, "nhd", "packed", "bf16", "none"),
    Layout(1, 512, 64, 16, "nhd", "packed", "f8E4M3FN", "per_tensor"),
    Layout(1, 512, 64, 64, "hnd", "packed", "f8E4M3FNUZ", "per_head"),
    Layout(4, 192, 128, 16, "nhd", "separate", "f8E5M2FNUZ", "per_head"),
    Layout(4, 192, 128, 256, "hnd", "separate", "bf16", "none"),
    Layout(4, 128, 192, 16, "nhd", "packed", "f8E4M3FN", "per_tensor"),
    # Many vector accesses per token (more than one CTA's threads) and very
    # few (many tokens per CTA).
    Layout(16, 512, 512, 8, "nhd", "separate", "bf16", "none"),
    Layout(32, 128, 128, 16, "hnd", "packed", "f8E4M3FN", "per_head"),
    Layout(1, 8, 8, 16, "nhd", "separate", "bf16", "none"),
    Layout(1, 4, 2, 16, "hnd", "packed", "f8E4M3FNUZ", "per_tensor"),
    # Block sizes that are not powers of two.
    Layout(4, 192, 128, 24, "hnd", "separate", "f8E4M3FN", "per_head"),
    Layout(4, 192, 128, 48, "nhd", "packed", "bf16", "none"),
    Layout(2, 80, 46, 5, "nhd", "separate", "f8E5M2", "per_tensor"),
]
OTHER_CASES = [(1, "dense", "i64"), (42, "fused", "i32"), (300, "padded", "i64"),
               (42, "misaligned", "i64")]


@pytest.mark.parametrize("case", OTHER_CASES, ids=lambda c: f"T{c[0]}-{c[1]}-{c[2]}")
@pytest.mark.parametrize("layout", OTHER_LAYOUTS, ids=lid)
def test_other_geometries(kcache, layout, case):
    T, mode, slot_t = case
    run_roundtrip(Group(kcache, layout, "bf16"), T, mode, slot_t,
                  seed_of("other", layout, case))


# Input / output types other than bf16 (f16, f32), also into a bf16 cache
# (conversion) and an f32 cache (raw).
IO_CASES = [
    (Layout(4, 192, 128, 16, "nhd", "separate", "bf16", "none"), "f16"),
    (Layout(4, 192, 128, 16, "nhd", "separate", "bf16", "none"), "f32"),
    (Layout(4, 192, 128, 16, "hnd", "packed", "f8E4M3FN", "per_head"), "f16"),
    (Layout(4, 192, 128, 64, "nhd", "separate", "f8E4M3FN", "per_tensor"), "f32"),
    (Layout(4, 192, 128, 16, "nhd", "packed", "f8E5M2", "per_head"), "f32"),
    (Layout(4, 192, 128, 16, "hnd", "separate", "f8E4M3FNUZ", "per_head"), "f16"),
    (Layout(2, 46, 46, 16, "nhd", "separate", "f16", "none"), "f16"),
    (Layout(2, 46, 80, 16, "hnd", "separate", "f32", "none"), "f32"),
    (Layout(2, 80, 80, 16, "nhd", "packed", "f16", "none"), "bf16"),
    # e5m2 max 57344 * scale up to 2 overflows f16 on dequantize: +-inf.
    (Layout(4, 192, 128, 16, "nhd", "separate", "f8E5M2", "per_head"), "f16"),
]


@pytest.mark.parametrize("case", [(42, "fused", "i64"), (7, "misaligned", "i32")],
                         ids=lambda c: f"T{c[0]}-{c[1]}-{c[2]}")
@pytest.mark.parametrize("layout,io", IO_CASES, ids=[f"{lid(l)}-io_{io}" for l, io in IO_CASES])
def test_io_types(kcache, layout, io, case):
    T, mode, slot_t = case
    run_roundtrip(Group(kcache, layout, io), T, mode, slot_t,
                  seed_of("io", layout, io, case))


# ---------------------------------------------------------------------------
# Explicit strides
# ---------------------------------------------------------------------------

def _combined(heads, hk, hv, bs, order, dtype, scale):
    """K and V of a block side by side in one [num_blocks, 2, ...] buffer:
    block = bs*H*(hk+hv), V starts bs*H*hk elements after K."""
    blk = bs * heads * (hk + hv)
    if order == "nhd":
        ks, vs = (blk, heads * hk, hk), (blk, heads * hv, hv)
    else:
        ks, vs = (blk, hk, bs * hk), (blk, hv, bs * hv)
    lay = Layout(heads, hk, hv, bs, order, "separate", dtype, scale, ks, vs)
    return lay, dict(v_offset=bs * heads * hk)


def _padded(heads, hk, hv, bs, order, packing, dtype, scale, pad_block, pad_token=0,
            only_k=False):
    base = Layout(heads, hk, hv, bs, order, packing, dtype, scale)
    def st(side):
        b, t, h = base.dense_strides(side)
        if order == "nhd":
            t2 = t + pad_token
            return (bs * t2 + pad_block, t2, h)
        h2 = h + bs * pad_token
        return (heads * h2 + pad_block, t + pad_token, h2)
    ks = st("k")
    vs = None if only_k else st("v")
    return base.replace(k_strides=ks, v_strides=vs), {}


def _dynamic(heads, hk, hv, bs, order, packing, dtype, scale, pad_block=0,
             pad_token=0, partial=False):
    """'?' strides; the actual values (dense plus padding) go in the args."""
    real, _ = _padded(heads, hk, hv, bs, order, packing, dtype, scale, pad_block,
                      pad_token, only_k=packing == "packed")
    dyn = {"k": real.declared_strides("k"), "v": real.declared_strides("v")}
    if partial:  # only the block stride is dynamic
        ks = (None, *dyn["k"][1:])
        vs = None if packing == "packed" else (None, *dyn["v"][1:])
    else:
        ks = (None, None, None)
        vs = None if packing == "packed" else (None, None, None)
    lay = real.replace(k_strides=ks, v_strides=vs)
    return lay, dict(dyn=dyn)


STRIDE_CASES = {
    "combined-nhd-bf16": _combined(4, 192, 128, 16, "nhd", "bf16", "none"),
    "combined-hnd-e4m3fn": _combined(4, 192, 128, 16, "hnd", "f8E4M3FN", "per_head"),
    "combined-sym-8x128": _combined(8, 128, 128, 16, "nhd", "bf16", "none"),
    "padblock64-nhd-bf16": _padded(4, 192, 128, 16, "nhd", "separate", "bf16", "none", 64),
    "padblock3-hnd-e5m2": _padded(4, 192, 128, 16, "hnd", "separate", "f8E5M2", "per_tensor", 3),
    "padtoken8-hnd-bf16": _padded(4, 192, 128, 16, "hnd", "separate", "bf16", "none", 32, 8),
    "padtoken8-nhd-e4m3fnuz": _padded(4, 192, 128, 64, "nhd", "separate", "f8E4M3FNUZ", "per_head", 0, 8),
    "packed-padblock-konly": _padded(4, 192, 128, 16, "nhd", "packed", "f8E4M3FN", "per_head", 128, only_k=True),
    "packed-hnd-padtoken": _padded(4, 192, 128, 16, "hnd", "packed", "bf16", "none", 0, 16, only_k=True),
    "dyn-dense-nhd-bf16": _dynamic(4, 192, 128, 16, "nhd", "separate", "bf16", "none"),
    "dyn-padded-hnd-e4m3fn": _dynamic(4, 192, 128, 16, "hnd", "separate", "f8E4M3FN", "per_head", 64, 8),
    "dyn-odd-nhd-bf16": _dynamic(4, 192, 128, 16, "nhd", "separate", "bf16", "none", 3, 1),
    "dyn-partial-nhd-e5m2": _dynamic(4, 192, 128, 64, "nhd", "separate", "f8E5M2", "per_head", 16, 0, True),
    "dyn-packed-nhd-bf16": _dynamic(4, 192, 128, 16, "nhd", "packed", "bf16", "none", 32),
    "dyn-packed-hnd-e4m3fn-odd": _dynamic(4, 192, 128, 16, "hnd", "packed", "f8E4M3FN", "per_tensor", 5, 1),
    "dyn-576-packed": _dynamic(1, 512, 64, 16, "nhd", "packed", "bf16", "none", 8),
}


@pytest.mark.parametrize("case", [(7, "dense", "i64"), (300, "fused", "i32"),
                                  (42, "misaligned", "i64")],
                         ids=lambda c: f"T{c[0]}-{c[1]}-{c[2]}")
@pytest.mark.parametrize("layout,cache_kw", list(STRIDE_CASES.values()),
                         ids=list(STRIDE_CASES.keys()))
def test_explicit_strides(kcache, layout, cache_kw, case):
    T, mode, slot_t = case
    run_roundtrip(Group(kcache, layout, "bf16"), T, mode, slot_t,
                  seed_of("strides", layout, case), cache_kw=cache_kw)


# ---------------------------------------------------------------------------
# Packed layouts must ignore value_cache (kernel_abi.h: "ignored when packed")
# ---------------------------------------------------------------------------

PACKED_LAYOUTS = [
    Layout(4, 192, 128, 16, "nhd", "packed", "bf16", "none"),
    Layout(4, 192, 128, 64, "hnd", "packed", "f8E4M3FN", "per_head"),
    Layout(1, 512, 64, 64, "nhd", "packed", "bf16", "none"),
]


@pytest.mark.parametrize("layout", PACKED_LAYOUTS, ids=lid)
@pytest.mark.parametrize("value_cache", ["decoy", "same"])
def test_packed_value_cache(kcache, layout, value_cache):
    """value_cache points at a decoy buffer (K and V must both land in, and
    be read from, key_cache; the decoy stays untouched) or at key_cache
    itself (what cautious callers pass)."""
    run_roundtrip(Group(kcache, layout, "bf16"), 42, "dense", "i64",
                  seed_of("decoy", layout, value_cache),
                  cache_kw=dict(packed_value_cache=value_cache))


# ---------------------------------------------------------------------------
# checked kernels
# ---------------------------------------------------------------------------

CHECKED_LAYOUTS = [
    Layout(4, 192, 128, 16, "nhd", "separate", "bf16", "none"),
    Layout(4, 192, 128, 16, "hnd", "packed", "f8E4M3FN", "per_head"),
    Layout(4, 192, 128, 64, "nhd", "separate", "f8E5M2", "per_tensor"),
    Layout(2, 46, 46, 16, "hnd", "separate", "f8E4M3FNUZ", "per_head"),
]


@pytest.mark.parametrize("slot_t", ["i64", "i32"])
@pytest.mark.parametrize("layout", CHECKED_LAYOUTS, ids=lid)
def test_checked(kcache, layout, slot_t):
    g = Group(kcache, layout, "bf16")
    rng = np.random.default_rng(seed_of("checked", layout, slot_t))
    T, bs = 42, layout.block_size
    nb = num_blocks_for(T, bs)
    block_bytes = bs * layout.heads * (layout.hk + layout.hv) * R.dt(layout.dtype).size
    # Post slack of two blocks: a write at slot >= limit would hit canaries.
    cache = Cache(layout, nb, rng, post=2 * block_bytes + 256)
    rows = Rows(T, layout, "bf16", "padded", rng)
    fill_inputs(rows, layout, rng)
    scales = make_scales(layout, rng)
    slots = make_slots(T, cache, rng, slot_t).astype(np.int64)
    lim = cache.limit
    big = 2 ** 31 - 1 if slot_t == "i32" else 2 ** 40
    bad_idx = [3, 10, 11, 20, 41]
    for i, v in zip(bad_idx, [lim, lim + 1, lim + bs, big, lim + bs - 1]):
        slots[i] = v
    slots = slots.astype(np.int64 if slot_t == "i64" else np.int32)
    bad = np.zeros(T, bool)
    bad[bad_idx] = True

    # Control: a checked launch with only valid slots leaves the flag at 0.
    flag = np.zeros(1, np.int32)
    ok_slots = np.where(bad, -1, slots).astype(slots.dtype)
    do_write(g.write(slot_t, checked=True), cache, rows, ok_slots, scales, flag)
    ref_write(cache, rows, ok_slots, scales)
    cache.check("checked reshape_and_cache, valid slots")
    cache.adopt()
    assert flag[0] == 0, "error_flag set although every slot was in range"

    # Out-of-range slots: flag set, nothing written for them, others written.
    rows2 = Rows(T, layout, "bf16", "dense", rng)
    fill_inputs(rows2, layout, rng)
    cache.resnapshot()
    flag[0] = 0
    do_write(g.write(slot_t, checked=True), cache, rows2, slots, scales, flag)
    ref_write(cache, rows2, slots, scales, limit=lim)
    assert flag[0] == 1, "checked reshape_and_cache did not set error_flag"
    cache.check("checked reshape_and_cache, out-of-range slots")
    cache.adopt()

    # Gathers: rows of out-of-range slots untouched, flag set.
    for deq, sl in ((False, "i64"), (True, "i32")):
        sl_arr = slots.astype(np.int64 if sl == "i64" else np.int32)
        if sl == "i32":
            sl_arr[bad_idx[3]] = 2 ** 31 - 1
        out = Rows(T, layout, "bf16" if deq else layout.dtype, "padded", rng)
        out.snapshot()
        flag[0] = 0
        do_gather(g.gather(sl, dequantize=deq, checked=True), cache, out, sl_arr,
                  scales if deq else NO_SCALES, flag)
        ref_gather(cache, out, sl_arr, scales, dequantize=deq, limit=lim)
        assert flag[0] == 1, f"checked gather (dequantize={deq}) did not set error_flag"
        out.check(f"checked gather (dequantize={deq})", strict=not deq)
        cache.check("checked gather (cache must stay unchanged)", strict=True)
        # And without bad slots the flag stays 0.
        flag[0] = 0
        ok = np.where(bad, -1, sl_arr).astype(sl_arr.dtype)
        do_gather(g.gather(sl, dequantize=deq, checked=True), cache, out, ok, scales, flag)
        assert flag[0] == 0, "checked gather set error_flag for in-range slots"


# ---------------------------------------------------------------------------
# Large block ids and > 2^31-byte offsets
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("slot_t", ["i64", "i32"])
@pytest.mark.parametrize("layout", [Layout(1, 8, 8, 2, "nhd", "separate", "bf16", "none"),
                                    Layout(2, 16, 8, 1, "hnd", "packed", "f8E4M3FN", "per_head")],
                         ids=lid)
def test_block_ids_above_65535(kcache, layout, slot_t):
    g = Group(kcache, layout, "bf16")
    rng = np.random.default_rng(seed_of("bigid", layout, slot_t))
    nb = 70000
    cache = Cache(layout, nb, rng)
    T = 42
    rows = Rows(T, layout, "bf16", "fused", rng)
    fill_inputs(rows, layout, rng)
    scales = make_scales(layout, rng)
    lo = 65530 * layout.block_size
    s = rng.choice(np.arange(lo, cache.limit), size=T, replace=False)
    s[5] = -1
    s[6] = cache.limit - 1
    slots = s.astype(np.int64 if slot_t == "i64" else np.int32)
    do_write(g.write(slot_t), cache, rows, slots, scales)
    ref_write(cache, rows, slots, scales)
    cache.check("reshape_and_cache at block ids > 65535")
    out = Rows(T, layout, "bf16", "padded", rng)
    out.snapshot()
    do_gather(g.gather(slot_t, dequantize=True), cache, out, slots, scales)
    ref_gather(cache, out, slots, scales, dequantize=True)
    out.check("gather at block ids > 65535")


class SparseCache:
    """A huge zero-filled anonymous mapping; only touched pages use memory."""

    def __init__(self, nbytes: int):
        self.mm = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.arr = np.frombuffer(self.mm, dtype=np.uint8)

    def close(self):
        del self.arr
        try:
            self.mm.close()
        except BufferError:  # a view still exists; the GC unmaps it
            pass


@pytest.mark.parametrize("slot_t", ["i64", "i32"])
def test_offsets_beyond_4GiB(kcache, slot_t):
    """Block stride 2^28 bf16 elements: blocks >= 8 lie past 2^32 bytes and
    2^31 elements; 64-bit offsets everywhere are required."""
    H, D, bs, nb = 2, 64, 16, 12
    bstride = 1 << 28
    lay = Layout(H, D, D, bs, "nhd", "separate", "bf16", "none",
                 (bstride, H * D, D), (bstride, H * D, D))
    g = Group(kcache, lay, "bf16")
    rng = np.random.default_rng(seed_of("4g", slot_t))
    extent = R.side_extent(lay, "k", nb, lay.declared_strides("k"))
    try:
        mk, mv = SparseCache(extent * 2), SparseCache(extent * 2)
    except (OSError, ValueError, OverflowError) as e:  # pragma: no cover
        pytest.fail(f"could not map a sparse {extent * 2 >> 30} GiB cache: {e}")
    try:
        T = 40
        rows = Rows(T, lay, "bf16", "fused", rng)
        fill_inputs(rows, lay, rng)
        blocks = rng.integers(8, nb, T)
        offs = rng.choice(bs, T)
        s = blocks * bs + offs
        _, first = np.unique(s, return_index=True)
        keep = np.zeros(T, bool)
        keep[first] = True
        s = np.where(keep, s, -1)
        slots = s.astype(np.int64 if slot_t == "i64" else np.int32)
        a = RCArgs()
        a.key, a.value = rows.ptr["k"], rows.ptr["v"]
        a.key_cache, a.value_cache = mk.arr.ctypes.data, mv.arr.ctypes.data
        a.slot_mapping = slots.ctypes.data
        a.num_tokens, a.num_blocks = T, nb
        a.key_stride_token, a.key_stride_head = rows.stride["k"]
        a.value_stride_token, a.value_stride_head = rows.stride["v"]
        g.write(slot_t).launch(a, T)
        used = sorted(set(int(b) for b in s[s >= 0] // bs))
        for side, m in (("k", mk), ("v", mv)):
            view = R.strided_view(m.arr, np.uint16, 0, (nb, bs, H, D),
                                  (bstride, H * D, D, 1))
            exp = np.zeros((nb, bs, H, D), np.uint16)[used]
            valid = s >= 0
            src = np.ascontiguousarray(rows.views[side])
            for t in np.nonzero(valid)[0]:
                exp[used.index(int(s[t] // bs)), s[t] % bs] = src[t]
            R.assert_bits_equal(f"{side} blocks past 4 GiB", view[used], exp, "bf16")
            # Nothing else written: the 4 KiB around each used block are zero.
            for b in used:
                start = b * bstride * 2
                n = bs * H * D * 2
                assert not m.arr[start - 4096:start].any(), f"bytes before block {b} written"
                assert not m.arr[start + n:start + n + 4096].any(), f"bytes after block {b} written"
            assert not m.arr[:1 << 20].any(), "block 0 region written"
        # Gather back.
        out = Rows(T, lay, "bf16", "dense", rng)
        out.snapshot()
        ga = GArgs()
        ga.key_cache, ga.value_cache = mk.arr.ctypes.data, mv.arr.ctypes.data
        ga.slot_mapping = slots.ctypes.data
        ga.key_out, ga.value_out = out.ptr["k"], out.ptr["v"]
        ga.num_tokens, ga.num_blocks = T, nb
        ga.key_out_stride_token, ga.key_out_stride_head = out.stride["k"]
        ga.value_out_stride_token, ga.value_out_stride_head = out.stride["v"]
        g.gather(slot_t).launch(ga, T)
        valid = s >= 0
        for side in "kv":
            R.assert_bits_equal(f"{side} gathered past 4 GiB",
                                np.ascontiguousarray(out.views[side])[valid],
                                np.ascontiguousarray(rows.views[side])[valid], "bf16")
    finally:
        for m in (mk, mv):
            m.close()


# ---------------------------------------------------------------------------
# Harness self-checks
# ---------------------------------------------------------------------------

def test_reference_sanity():
    """The reference's constants and rounding agree with ml_dtypes' own
    notion of the formats, and saturation clips rather than producing NaN."""
    import ml_dtypes
    for name, d in R.DTYPES.items():
        if d.is_fp8:
            assert float(ml_dtypes.finfo(d.np_type).max) == d.max_finite, name
            q = R.quantize(np.array([1e9, -1e9, np.inf, -np.inf], np.float32),
                           np.float32(1.0), name)
            back = R.to_f32(q, name)
            assert list(back) == [d.max_finite, -d.max_finite, d.max_finite, -d.max_finite], name
            assert np.isnan(R.to_f32(R.quantize(np.array([np.nan], np.float32), 1.0, name), name))[0]
    # RNE to bf16: 1 + 2^-8 is a tie -> 1.0; 1 + 3*2^-8 -> 1 + 2^-6... (ties to even)
    x = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8], np.float32)
    assert list(R.from_f32(x, "bf16")) == [0x3F80, 0x3F82]
    # A strided cache view addresses what the layout text says.
    lay = Layout(2, 3, 2, 4, "hnd", "packed", "bf16", "none")
    body = np.arange(2 * 2 * 4 * 5 * 2, dtype=np.uint16).view(np.uint8)
    v = R.cache_side_view(lay, "v", body, 2, lay.dense_strides("v"))
    # block 1, token 2, head 1, element 1: ((1*2 + 1)*4 + 2)*5 + 3 + 1
    assert v[1, 2, 1, 1] == ((1 * 2 + 1) * 4 + 2) * 5 + 3 + 1
