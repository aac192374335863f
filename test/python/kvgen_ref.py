"""Independent numpy reference model of kvgen's paged K/V cache kernels.

Nothing here calls or imports kvgen code. The cache geometry is written out
from the layout description (docs in dialect/include/kvgen/Dialect/
KVAttrs.td): every side (K or V) of a cache is an ``as_strided`` view of
shape ``[num_blocks, block_size, num_kv_heads, head_size]`` over the raw
bytes of its buffer, built from the element strides stated here, and the
operations are numpy fancy indexing on those views. Number formats come
from ml_dtypes / numpy:

* quantizing to fp8:  q = fp8(clip(float32(x) / scale, -max, max)) with
  round-to-nearest-even (ml_dtypes), NaN stays NaN;
* dequantizing:       out = out_type(float32(q) * scale) (RNE);
* same element type without a scale: the raw bits are copied.

All arrays handed around are *storage* arrays (uint8 / uint16 / uint32 bit
patterns) so that comparisons are bit-exact.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    name: str  # MLIR spelling
    np_type: type  # numpy / ml_dtypes value type
    storage: type  # unsigned integer type of the same width
    max_finite: float  # fp8 saturation bound; 0 for wider types

    @property
    def size(self) -> int:
        return np.dtype(self.storage).itemsize

    @property
    def is_fp8(self) -> bool:
        return self.size == 1


# Max finite values from the OCP OFP8 spec / AMD FNUZ formats (independent of
# kvgen's Layout.cpp); test_reference_sanity cross-checks them with ml_dtypes.
DTYPES = {
    "bf16": DType("bf16", ml_dtypes.bfloat16, np.uint16, 0.0),
    "f16": DType("f16", np.float16, np.uint16, 0.0),
    "f32": DType("f32", np.float32, np.uint32, 0.0),
    "f8E4M3FN": DType("f8E4M3FN", ml_dtypes.float8_e4m3fn, np.uint8, 448.0),
    "f8E4M3FNUZ": DType("f8E4M3FNUZ", ml_dtypes.float8_e4m3fnuz, np.uint8, 240.0),
    "f8E5M2": DType("f8E5M2", ml_dtypes.float8_e5m2, np.uint8, 57344.0),
    "f8E5M2FNUZ": DType("f8E5M2FNUZ", ml_dtypes.float8_e5m2fnuz, np.uint8, 57344.0),
}


def dt(name) -> DType:
    return name if isinstance(name, DType) else DTYPES[name]


# ---------------------------------------------------------------------------
# Layout description
# ---------------------------------------------------------------------------

StrideT = Tuple[Optional[int], Optional[int], Optional[int]]  # None = '?'


@dataclass(frozen=True)
class Layout:
    heads: int
    hk: int
    hv: int
    block_size: int
    order: str = "nhd"  # nhd | hnd
    packing: str = "separate"  # separate | packed
    dtype: str = "bf16"
    scale: str = "none"  # none | per_tensor | per_head
    k_strides: Optional[StrideT] = None
    v_strides: Optional[StrideT] = None

    @property
    def packed(self) -> bool:
        return self.packing == "packed"

    def head_size(self, side: str) -> int:
        return self.hk if side == "k" else self.hv

    def row_width(self, side: str) -> int:
        return self.hk + self.hv if self.packed else self.head_size(side)

    def base(self, side: str) -> int:
        """First column of `side` inside its row."""
        return self.hk if (self.packed and side == "v") else 0

    def dense_strides(self, side: str) -> Tuple[int, int, int]:
        """(block, token, head) element strides of the dense tensor."""
        w, h, bs = self.row_width(side), self.heads, self.block_size
        if self.order == "nhd":  # [nb, bs, h, w]
            return (bs * h * w, h * w, w)
        assert self.order == "hnd"  # [nb, h, bs, w]
        return (h * bs * w, w, bs * w)

    def declared_strides(self, side: str) -> StrideT:
        own = self.k_strides if side == "k" else self.v_strides
        if own is not None:
            return tuple(own)
        other = self.v_strides if side == "k" else self.k_strides
        if self.packed and other is not None:
            return tuple(other)
        return self.dense_strides(side)

    def has_dynamic(self) -> bool:
        return any(s is None for side in "kv" for s in self.declared_strides(side))

    def mlir(self) -> str:
        def strides(s):
            return "[" + ", ".join("?" if x is None else str(x) for x in s) + "]"

        parts = [
            f"num_kv_heads = {self.heads}",
            f"head_size_k = {self.hk}",
            f"head_size_v = {self.hv}",
            f"block_size = {self.block_size}",
            f"order = {self.order}",
            f"packing = {self.packing}",
            f"dtype = {self.dtype}",
            f"scale = {self.scale}",
        ]
        if self.k_strides is not None:
            parts.append(f"k_strides = {strides(self.k_strides)}")
        if self.v_strides is not None:
            parts.append(f"v_strides = {strides(self.v_strides)}")
        return "#kv.layout<" + ", ".join(parts) + ">"

    def short(self) -> str:
        def st(x):
            return "x".join("d" if v is None else str(v) for v in x)

        s = (f"h{self.heads}-k{self.hk}-v{self.hv}-bs{self.block_size}-{self.order}"
             f"-{self.packing}-{self.dtype}-{self.scale}")
        if self.k_strides is not None:
            s += f"-ks{st(self.k_strides)}"
        if self.v_strides is not None:
            s += f"-vs{st(self.v_strides)}"
        return s

    def replace(self, **kw) -> "Layout":
        return dataclasses.replace(self, **kw)


# ---------------------------------------------------------------------------
# Buffers with canaries
# ---------------------------------------------------------------------------

ALIGN = 64


def canary_bytes(n: int, seed: int) -> np.ndarray:
    return ((np.arange(n, dtype=np.uint32) * 37 + 0xA5 + seed) & 0xFF).astype(np.uint8)


class Buffer:
    """`nbytes` of payload between `pre` and `post` bytes of canary, with the
    payload start aligned to ALIGN bytes (plus `misalign` bytes)."""

    def __init__(self, nbytes: int, rng: np.random.Generator, pre: int = 128,
                 post: int = 256, fill: str = "random", misalign: int = 0):
        assert pre % ALIGN == 0
        total = pre + misalign + nbytes + post
        raw = np.empty(total + ALIGN, dtype=np.uint8)
        off = (-raw.ctypes.data) % ALIGN
        self.raw = raw[off:off + total]
        self.pre = pre + misalign
        self.nbytes = nbytes
        self.raw[:self.pre] = canary_bytes(self.pre, 1)
        self.raw[self.pre + nbytes:] = canary_bytes(total - self.pre - nbytes, 2)
        body = self.raw[self.pre:self.pre + nbytes]
        if fill == "random":
            body[:] = rng.integers(0, 256, nbytes, dtype=np.uint8)
        elif fill == "zero":
            body[:] = 0
        else:
            raise ValueError(fill)

    @property
    def ptr(self) -> int:
        return self.raw.ctypes.data + self.pre

    def body(self) -> np.ndarray:
        return self.raw[self.pre:self.pre + self.nbytes]

    def snapshot(self) -> np.ndarray:
        return self.raw.copy()

    def canaries_intact(self, snapshot: np.ndarray) -> bool:
        return (np.array_equal(self.raw[:self.pre], snapshot[:self.pre]) and
                np.array_equal(self.raw[self.pre + self.nbytes:],
                               snapshot[self.pre + self.nbytes:]))


def strided_view(raw_body: np.ndarray, storage: type, elem_offset: int,
                 shape: Sequence[int], elem_strides: Sequence[int]) -> np.ndarray:
    """A writable view of `shape` over raw bytes, element strides given."""
    flat = raw_body.view(storage)
    isz = np.dtype(storage).itemsize
    # Bounds: the largest element addressed must lie inside the body.
    last = elem_offset + sum((n - 1) * s for n, s in zip(shape, elem_strides))
    assert elem_offset >= 0 and last < flat.size, (elem_offset, last, flat.size)
    return np.lib.stride_tricks.as_strided(
        flat[elem_offset:], shape=tuple(shape),
        strides=tuple(s * isz for s in elem_strides), writeable=True)


def side_extent(layout: Layout, side: str, num_blocks: int,
                strides: Tuple[int, int, int], elem_offset: int = 0) -> int:
    """Elements a buffer must hold for `side` starting at elem_offset."""
    b, t, h = strides
    return (elem_offset + (num_blocks - 1) * b + (layout.block_size - 1) * t +
            (layout.heads - 1) * h + layout.base(side) + layout.head_size(side))


def cache_side_view(layout: Layout, side: str, raw_body: np.ndarray,
                    num_blocks: int, strides: Tuple[int, int, int],
                    elem_offset: int = 0) -> np.ndarray:
    """[num_blocks, block_size, heads, head_size] storage view of one side."""
    b, t, h = strides
    return strided_view(raw_body, dt(layout.dtype).storage,
                        elem_offset + layout.base(side),
                        (num_blocks, layout.block_size, layout.heads,
                         layout.head_size(side)),
                        (b, t, h, 1))


# ---------------------------------------------------------------------------
# Number formats
# ---------------------------------------------------------------------------

def to_f32(bits: np.ndarray, dtype) -> np.ndarray:
    d = dt(dtype)
    return np.ascontiguousarray(bits).view(d.np_type).astype(np.float32)


def from_f32(x: np.ndarray, dtype) -> np.ndarray:
    """float32 -> storage bits of `dtype`, RNE (no saturation)."""
    d = dt(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x, np.float32).astype(d.np_type).view(d.storage)


def quantize(x: np.ndarray, scale: np.ndarray, dtype) -> np.ndarray:
    """fp8 bits of saturate(x / scale), RNE; x float32, scale broadcastable."""
    d = dt(dtype)
    assert d.is_fp8
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        y = (np.asarray(x, np.float32) / np.asarray(scale, np.float32)).astype(np.float32)
        y = np.clip(y, np.float32(-d.max_finite), np.float32(d.max_finite))
        return y.astype(d.np_type).view(np.uint8)


def is_nan_bits(bits: np.ndarray, dtype) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.isnan(to_f32(bits, dtype))


def input_to_cache(in_bits: np.ndarray, in_dtype, cache_dtype,
                   scale: Optional[np.ndarray]) -> np.ndarray:
    """What reshape_and_cache stores for input rows [..., heads, D]."""
    ci, cc = dt(in_dtype), dt(cache_dtype)
    if cc.is_fp8:
        return quantize(to_f32(in_bits, ci), scale, cc)
    if ci.name == cc.name:
        return in_bits.copy()
    return from_f32(to_f32(in_bits, ci), cc)


def cache_to_output(c_bits: np.ndarray, cache_dtype, out_dtype, dequantize: bool,
                    scale: Optional[np.ndarray]) -> np.ndarray:
    """What gather writes for cache rows [..., heads, D]."""
    cc, co = dt(cache_dtype), dt(out_dtype)
    if not dequantize:
        assert cc.name == co.name
        return c_bits.copy()
    if cc.is_fp8:
        with np.errstate(over="ignore", invalid="ignore"):
            y = (to_f32(c_bits, cc) * np.asarray(scale, np.float32)).astype(np.float32)
        return from_f32(y, co)
    if cc.name == co.name:
        return c_bits.copy()
    return from_f32(to_f32(c_bits, cc), co)


def scale_for_rows(scale: Optional[np.ndarray], kind: str, heads: int):
    """Broadcastable [heads, 1] scale for rows shaped [..., heads, D]."""
    if kind == "none":
        return None
    s = np.asarray(scale, np.float32)
    if kind == "per_tensor":
        return np.full((heads, 1), s[0], np.float32)
    assert kind == "per_head" and s.shape == (heads,)
    return s.reshape(heads, 1)


# ---------------------------------------------------------------------------
# Reference operations (in place on storage views)
# ---------------------------------------------------------------------------

def valid_slots(slots: np.ndarray, limit: Optional[int]) -> np.ndarray:
    v = slots >= 0
    if limit is not None:
        v &= slots < limit
    return v


def ref_reshape_and_cache(cache_view: np.ndarray, rows: np.ndarray,
                          slots: np.ndarray, block_size: int,
                          limit: Optional[int] = None) -> None:
    """cache_view [nb, bs, H, D]; rows [T, H, D] already in cache bits."""
    s = slots.astype(np.int64)
    v = valid_slots(s, limit)
    sv = s[v]
    assert len(np.unique(sv)) == len(sv), "duplicate slots make the result racy"
    cache_view[sv // block_size, sv % block_size] = rows[v]


def ref_gather(out_view: np.ndarray, cache_rows_fn, cache_view: np.ndarray,
               slots: np.ndarray, block_size: int,
               limit: Optional[int] = None) -> None:
    """out_view [T, H, D]; cache_rows_fn converts gathered cache bits."""
    s = slots.astype(np.int64)
    v = valid_slots(s, limit)
    sv = s[v]
    out_view[np.nonzero(v)[0]] = cache_rows_fn(cache_view[sv // block_size,
                                                          sv % block_size])


# ---------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------

def mismatches(actual: np.ndarray, expected: np.ndarray, dtype,
               strict: bool = False) -> np.ndarray:
    """Indices where bits differ, except (unless strict) where both are NaN
    of `dtype`: conversions only promise that NaN stays NaN, raw copies
    (strict) must keep every bit."""
    a = np.ascontiguousarray(actual)
    e = np.ascontiguousarray(expected)
    assert a.shape == e.shape and a.dtype == e.dtype
    diff = a != e
    if diff.any() and not strict:
        idx = np.nonzero(diff)
        both_nan = is_nan_bits(a[idx], dtype) & is_nan_bits(e[idx], dtype)
        keep = ~both_nan
        return np.stack([i[keep] for i in idx], axis=-1)
    return np.stack(np.nonzero(diff), axis=-1)


def describe_mismatch(what: str, actual, expected, dtype, bad, limit=6) -> str:
    lines = [f"{what}: {len(bad)} element(s) differ"]
    for ix in bad[:limit]:
        ix = tuple(int(i) for i in ix)
        a, e = actual[ix], expected[ix]
        lines.append(f"  at {ix}: got 0x{int(a):x} ({to_f32(np.array([a]), dtype)[0]!r})"
                     f" expected 0x{int(e):x} ({to_f32(np.array([e]), dtype)[0]!r})")
    return "\n".join(lines)


def assert_bits_equal(what: str, actual, expected, dtype, strict: bool = False) -> None:
    bad = mismatches(actual, expected, dtype, strict)
    if len(bad):
        raise AssertionError(describe_mismatch(what, actual, expected, dtype, bad))
