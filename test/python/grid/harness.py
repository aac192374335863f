"""The grid harness's machinery: array back ends, buffers with canaries,
the reference built from the layout written out here (not from kvgen), and
the checks. Used by the test modules of this folder through their
`backend` fixture (conftest.py).

Array back ends (Backend.X):
  NumpyX   numpy + ml_dtypes on the host; conversions are those of the
           numpy reference kvgen_ref.py (test/python)
  TorchX   torch on a CUDA device (the GPU run: the reference is torch's
           own conversions, computed on the device) or on the CPU
           (--host-reference torch, to check this file without a GPU)
All arrays handed around are bit arrays (uint8 / 16- / 32-bit integers):
comparisons are bit for bit.

Buffers: every cache, input and output lives in a uint8 buffer
[LEAD canary bytes | body | tail canary bytes] with a second copy, `exp`,
that the reference updates; a check compares the whole buffer with `exp`
(canaries, unwritten slots, padding between rows and blocks). Where a
conversion is involved (fp8, another dtype) an element may differ from the
reference only where the reference is NaN and the kernel wrote a NaN too
(the formats promise NaN stays NaN, not its bits: torch canonicalizes NaN,
kvgen keeps the sign); raw copies must keep every bit. On the host, caches
of more than SPARSE_MIN bytes are sparse zero-filled mappings (only the
touched pages use memory), so the > 4 GiB cases run there as well.
"""

import math
import mmap
import zlib

import numpy as np

import kvgen_ref as R

LEAD = 256   # canary bytes before each buffer (keeps 256-byte alignment)
TAIL = 4096  # default canary bytes after each cache (--slack)
ROW_TAIL = 256
SPARSE_MIN = 1 << 30  # host caches from this size on: sparse mappings
ESIZE = {n: d.size for n, d in R.DTYPES.items()}
FP8 = tuple(n for n, d in R.DTYPES.items() if d.is_fp8)
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)  # Linux value


def canary(n, seed):
    return ((np.arange(n, dtype=np.uint32) * 37 + 0xA5 + seed) &
            0xFF).astype(np.uint8)


def seed_of(*parts):
    return zlib.crc32(repr(parts).encode())


def allbits_np(n, io, start):
    """n 16-bit patterns of io (bf16 or f16) counting up from `start`,
    wrapping, with each NaN pattern replaced by the infinity of its sign.
    NaN is left out here (the other inputs have NaNs) so that every other
    pattern is compared through the fast and exact quantizing paths."""
    b = ((np.arange(n, dtype=np.int64) + start) % 65536).astype(np.uint16)
    exp = np.uint16(0x7F80 if io == "bf16" else 0x7C00)
    nan = ((b & exp) == exp) & ((b & np.uint16(0x7FFF)) != exp)
    b[nan] = (b[nan] & np.uint16(0x8000)) | exp
    return b


SPECIALS = (np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30)


#---------------------------------------------------------------------------
# Array back ends
#---------------------------------------------------------------------------

class NumpyX:
    """numpy arrays in host memory; conversions from kvgen_ref."""
    name = "numpy"
    CHUNK = 1 << 24  # 64-bit words per chunk of big comparisons

    def __init__(self):
        self.INT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

    def gen(self, seed):
        return np.random.default_rng(seed)

    def u8(self, n, sparse=False):
        if sparse:
            m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE |
                          mmap.MAP_ANONYMOUS | _MAP_NORESERVE)
            return np.frombuffer(m, dtype=np.uint8)  # zero-filled
        raw = np.empty(n + 512, np.uint8)
        off = (-raw.ctypes.data) % 512
        return raw[off:off + n]

    def fill_random(self, gen, a):
        """Arbitrary bytes: splitmix64 of a counter from a seed drawn from
        gen (several times faster than gen.bytes for caches of 100s of
        MB)."""
        n = a.size
        if not n:
            return
        seed = np.uint64(gen.integers(0, 1 << 63))
        w = -(-n // 8)
        for i in range(0, w, self.CHUNK):
            z = np.arange(i, min(w, i + self.CHUNK), dtype=np.uint64)
            z += seed
            z *= np.uint64(0x9E3779B97F4A7C15)
            z ^= z >> np.uint64(30)
            z *= np.uint64(0xBF58476D1CE4E5B9)
            z ^= z >> np.uint64(27)
            z *= np.uint64(0x94D049BB133111EB)
            z ^= z >> np.uint64(31)
            b = z.view(np.uint8)[:n - i * 8]
            a[i * 8:i * 8 + b.size] = b

    def fill(self, a, value):
        a[...] = value

    def put(self, a, start, values_np):
        a[start:start + len(values_np)] = values_np

    def clone(self, a):
        return a.copy()

    def _chunks(self, a, b):
        """(byte offset, chunk of a, chunk of b) covering both."""
        n = a.size
        w = n // 8
        if w:
            a64, b64 = a[:w * 8].view(np.uint64), b[:w * 8].view(np.uint64)
            for i in range(0, w, self.CHUNK):
                yield i * 8, a64[i:i + self.CHUNK], b64[i:i + self.CHUNK]
        if n % 8:
            yield w * 8, a[w * 8:], b[w * 8:]

    def equal(self, a, b):
        return all(np.array_equal(x, y) for _, x, y in self._chunks(a, b))

    def diff_positions(self, a, b, limit):
        """Byte positions where a and b differ (ascending), or None when
        there are more than `limit`."""
        out, count = [], 0
        for off, x, y in self._chunks(a, b):
            if np.array_equal(x, y):
                continue
            w = np.nonzero(x != y)[0]
            isz = x.dtype.itemsize
            xb = a[off + w[:, None] * isz + np.arange(isz)].reshape(-1)
            yb = b[off + w[:, None] * isz + np.arange(isz)].reshape(-1)
            p = (off + w[:, None] * isz + np.arange(isz)).reshape(-1)
            p = p[xb != yb]
            count += p.size
            if count > limit:
                return None
            out.append(p)
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    def upload(self, a):
        return np.ascontiguousarray(a)

    def download(self, a):
        return np.asarray(a)

    def flat(self, u8, es):
        return u8.view(self.INT[es])

    def strided(self, u8, byte_off, es, shape, strides):
        n = (u8.size - byte_off) // es * es
        flat = u8[byte_off:byte_off + n].view(self.INT[es])
        last = sum((n - 1) * s for n, s in zip(shape, strides))
        assert last < flat.size, (shape, strides, flat.size)
        return np.lib.stride_tricks.as_strided(
            flat, shape=tuple(shape), strides=tuple(s * es for s in strides),
            writeable=True)

    def arange(self, n):
        return np.arange(n, dtype=np.int64)

    def zeros_i32(self, n):
        return np.zeros(n, np.int32)

    def floats(self, vals):
        return np.asarray(vals, np.float32)

    def item(self, t):
        return int(np.asarray(t).reshape(-1)[0])

    def ptr(self, t):
        return t.ctypes.data

    def cat(self, parts):
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def sort(self, a):
        return np.sort(a)

    def unique(self, a):
        return np.unique(a)

    def in_sorted(self, sorted_a, x):
        """Boolean: x's entries that occur in sorted_a."""
        if not sorted_a.size:
            return np.zeros(x.shape, bool)
        i = np.minimum(np.searchsorted(sorted_a, x), sorted_a.size - 1)
        return sorted_a[i] == x

    def nonzero(self, mask):
        return np.nonzero(mask.reshape(-1))[0]

    def isnan(self, bits, dt):
        return R.is_nan_bits(bits, dt)

    def to_cache(self, bits, io, cd, scale):
        return R.input_to_cache(np.ascontiguousarray(bits), io, cd, scale)

    def to_output(self, bits, cd, out, dequantize, scale):
        return R.cache_to_output(np.ascontiguousarray(bits), cd, out,
                                 dequantize, scale)

    def values(self, gen, shape, io, cd):
        """io bits of float32 values: mostly moderate, some that saturate
        fp8 after scaling, some tiny (fp8 subnormals), and a few +-inf /
        NaN / +-0."""
        rng = gen
        x = rng.standard_normal(shape, dtype=np.float32) * np.float32(3.0)
        u = rng.random(shape, dtype=np.float32)
        c = R.dt(cd)
        big = c.max_finite * 8.0 if c.is_fp8 else 3.0e4
        x = np.where(u < 0.03, x * np.float32(big / 3.0), x)
        x = np.where((u >= 0.03) & (u < 0.06), x * np.float32(1e-3), x)
        sp = u > 0.995
        x[sp] = rng.choice(np.array(SPECIALS, np.float32), size=int(sp.sum()))
        return R.from_f32(x.astype(np.float32), io)

    def allbits(self, shape, io, start):
        return allbits_np(math.prod(shape), io, start).reshape(shape)

    def rows_at(self, view, idx):
        return view[idx]

    def sync(self):
        pass

    def free(self):
        pass


class TorchX:
    """torch tensors on `device` ("cuda:0", or "cpu" to check this code
    without a GPU); the reference uses torch's conversions."""
    name = "torch"

    def __init__(self, device):
        import torch
        self.torch = torch
        self.dev = torch.device(device)
        if self.dev.type == "cuda":
            torch.cuda.set_device(self.dev)
        self.DT = {"bf16": torch.bfloat16, "f16": torch.float16,
                   "f32": torch.float32, "f8E4M3FN": torch.float8_e4m3fn,
                   "f8E4M3FNUZ": torch.float8_e4m3fnuz,
                   "f8E5M2": torch.float8_e5m2,
                   "f8E5M2FNUZ": torch.float8_e5m2fnuz}
        self.INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32,
                    8: torch.int64}

    def gen(self, seed):
        g = self.torch.Generator(device=self.dev)
        g.manual_seed(seed)
        return g

    def u8(self, n, sparse=False):
        if sparse:  # CPU only: a sparse zero-filled mapping, shared
            assert self.dev.type == "cpu"
            return self.torch.from_numpy(NumpyX().u8(n, True))
        return self.torch.empty(n, dtype=self.torch.uint8, device=self.dev)

    def fill_random(self, gen, a):
        if a.numel():
            a.random_(0, 256, generator=gen)

    def fill(self, a, value):
        a.fill_(value)

    def put(self, a, start, values_np):
        a[start:start + len(values_np)] = self.upload(values_np)

    def clone(self, a):
        return a.clone()

    CHUNK = 1 << 28  # bytes per chunk of comparisons (bounds temporaries)

    def equal(self, a, b):
        n = a.numel()
        return all(bool(self.torch.equal(a[i:i + self.CHUNK],
                                         b[i:i + self.CHUNK]))
                   for i in range(0, n, self.CHUNK))

    def diff_positions(self, a, b, limit):
        out, count = [], 0
        for i in range(0, a.numel(), self.CHUNK):
            x, y = a[i:i + self.CHUNK], b[i:i + self.CHUNK]
            if self.torch.equal(x, y):
                continue
            p = (x != y).nonzero().reshape(-1) + i
            count += p.numel()
            if count > limit:
                return None
            out.append(p)
        return self.cat(out)

    def upload(self, a):
        return self.torch.from_numpy(np.ascontiguousarray(a)).to(self.dev)

    def download(self, a):
        return a.cpu().numpy()

    def flat(self, u8, es):
        return u8.view(self.INT[es])

    def strided(self, u8, byte_off, es, shape, strides):
        assert byte_off % es == 0 and u8.storage_offset() % es == 0
        n = (u8.numel() - byte_off) // es * es
        flat = u8[byte_off:byte_off + n].view(self.INT[es])
        return self.torch.as_strided(flat, tuple(shape), tuple(strides),
                                     flat.storage_offset())

    def arange(self, n):
        return self.torch.arange(n, device=self.dev, dtype=self.torch.int64)

    def zeros_i32(self, n):
        return self.torch.zeros(n, dtype=self.torch.int32, device=self.dev)

    def floats(self, vals):
        return self.torch.tensor(np.asarray(vals, np.float32),
                                 device=self.dev)

    def item(self, t):
        return int(t.reshape(-1)[0].item())

    def ptr(self, t):
        return t.data_ptr()

    def cat(self, parts):
        return self.torch.cat(parts) if parts else self.torch.zeros(
            0, dtype=self.torch.int64, device=self.dev)

    def sort(self, a):
        return self.torch.sort(a).values

    def unique(self, a):
        return self.torch.unique(a)

    def in_sorted(self, sorted_a, x):
        if not sorted_a.numel():
            return self.torch.zeros(x.shape, dtype=self.torch.bool,
                                    device=self.dev)
        i = self.torch.searchsorted(sorted_a, x).clamp_(max=sorted_a.numel()
                                                        - 1)
        return sorted_a[i] == x

    def nonzero(self, mask):
        return mask.reshape(-1).nonzero().reshape(-1)

    def decode(self, bits, dt):
        return bits.view(self.DT[dt]).float()

    def encode(self, v, dt):
        return v.to(self.DT[dt]).view(self.INT[ESIZE[dt]])

    def isnan(self, bits, dt):
        return self.torch.isnan(self.decode(bits, dt))

    def _scale(self, scale):
        return None if scale is None else self.torch.as_tensor(
            scale, dtype=self.torch.float32, device=self.dev)

    def to_cache(self, bits, io, cd, scale):
        """What reshape_and_cache stores: fp8 = saturate(x / scale) (RNE),
        the bits when io is the cache dtype, else x rounded to it."""
        if cd in FP8:
            m = R.dt(cd).max_finite
            y = (self.decode(bits, io) / self._scale(scale)).clamp(-m, m)
            return self.encode(y, cd)
        if io == cd:
            return bits.clone()
        return self.encode(self.decode(bits, io), cd)

    def to_output(self, bits, cd, out, dequantize, scale):
        """What gather writes: raw bits; fp8 dequantized q * scale (RNE);
        else converted."""
        if not dequantize or (cd == out and cd not in FP8):
            return bits.clone()
        x = self.decode(bits, cd)
        if cd in FP8:
            x = x * self._scale(scale)
        return self.encode(x, out)

    def values(self, gen, shape, io, cd):
        t = self.torch
        x = t.randn(shape, generator=gen, device=self.dev) * 3.0
        u = t.rand(shape, generator=gen, device=self.dev)
        c = R.dt(cd)
        big = c.max_finite * 8.0 if c.is_fp8 else 3.0e4
        x = t.where(u < 0.03, x * (big / 3.0), x)
        x = t.where((u >= 0.03) & (u < 0.06), x * 1e-3, x)
        sp = t.tensor(SPECIALS, dtype=t.float32, device=self.dev)
        pick = t.randint(0, len(SPECIALS), shape, generator=gen,
                         device=self.dev)
        x = t.where(u > 0.995, sp[pick], x)
        return self.encode(x, io)

    def allbits(self, shape, io, start):
        b = allbits_np(math.prod(shape), io, start).view(np.int16)
        return self.upload(b).reshape(shape)

    def rows_at(self, view, idx):
        return view[idx]

    def sync(self):
        if self.dev.type == "cuda":
            self.torch.cuda.synchronize(self.dev)

    def free(self):
        if self.dev.type == "cuda":
            self.torch.cuda.empty_cache()


#---------------------------------------------------------------------------
# Buffers
#---------------------------------------------------------------------------

class Buf:
    """`n` body bytes between LEAD and `tail` canary bytes (X uint8 array
    `raw`), and `exp`, the reference's copy of the whole buffer.
    fill: 'random' body bytes or 'zero' (a sparse buffer is zero)."""

    def __init__(self, X, n, gen, fill="random", tail=TAIL, sparse=False):
        self.X, self.n, self.tail, self.sparse = X, n, tail, sparse
        total = self.total = LEAD + n + tail
        self.raw = X.u8(total, sparse)
        X.put(self.raw, 0, canary(LEAD, 1))
        if tail:
            X.put(self.raw, LEAD + n, canary(tail, 2))
        if fill == "random":
            assert not sparse
            X.fill_random(gen, self.body())
        elif not sparse:
            X.fill(self.body(), 0)
        self.reset_exp()

    def reset_exp(self):
        """exp := the buffer as it is now (a sparse buffer: only while its
        body is still zero)."""
        if self.sparse:
            self.exp = self.X.u8(self.total, True)
            self.X.put(self.exp, 0, canary(LEAD, 1))
            if self.tail:
                self.X.put(self.exp, LEAD + self.n, canary(self.tail, 2))
        else:
            self.exp = self.X.clone(self.raw)

    def body(self, exp=False):
        return (self.exp if exp else self.raw)[LEAD:LEAD + self.n]

    def elems(self, es, exp=False):
        """The body as integers of es bytes."""
        return self.X.flat(self.body(exp), es)

    def check(self, what, es, dt, loose=None, limit=1 << 22):
        """[] when raw equals exp; else a message. loose: sorted element
        indices (into elems(es)) where the reference is NaN: there the
        buffer may hold any NaN."""
        X = self.X
        if X.equal(self.raw, self.exp):
            return []
        pos = X.diff_positions(self.raw, self.exp, limit)
        if pos is None:
            return [f"{what}: more than {limit} bytes differ from the "
                    "reference"]
        pos_np = X.download(pos)
        outside = pos_np[(pos_np < LEAD) | (pos_np >= LEAD + self.n)]
        inside = pos_np[(pos_np >= LEAD) & (pos_np < LEAD + self.n)]
        el = np.unique((inside - LEAD) // es)
        if el.size and loose is not None:
            el_x = X.upload(el)
            got = self.elems(es)[el_x]
            ok = X.in_sorted(loose, el_x) & X.isnan(got, dt)
            el = el[~X.download(ok)]
        msgs = []
        if el.size:
            got = X.download(self.elems(es)[X.upload(el[:4])])
            want = X.download(self.elems(es, True)[X.upload(el[:4])])
            detail = ", ".join(f"[{int(i)}] 0x{int(g) & (256 ** es - 1):x}"
                               f" want 0x{int(w) & (256 ** es - 1):x}"
                               for i, g, w in zip(el, got, want))
            msgs.append(f"{what}: {el.size} of {self.n // es} {dt} elements "
                        f"differ from the reference: {detail}")
        if outside.size:
            where = "before" if outside[0] < LEAD else "after"
            msgs.append(f"{what}: {outside.size} canary bytes changed, first "
                        f"{where} the buffer (byte {int(outside[0]) - LEAD} "
                        "of the body)")
        return msgs

    def adopt(self, es, idx):
        """exp := raw at element indices idx (after a passing check: they
        differ at most in NaN encodings), so later checks are strict."""
        if idx is not None and len(idx):
            self.elems(es, True)[idx] = self.elems(es)[idx]


class Rows:
    """K and V rows [T, H, D] of `dtype` (bit views) in buffers laid out by
    `mode` (cases.ROW_MODES). fill 'values' (inputs: row values from
    X.values or allbits, the gaps random) or 'random' (outputs)."""

    def __init__(self, X, gen, T, H, dk, dv, dtype, mode, fill="random",
                 cache_dtype=None, allbits=False):
        self.X, self.T, self.H, self.dtype = X, T, H, dtype
        es = self.es = ESIZE[dtype]
        D = {"k": dk, "v": dv}
        where = {}
        if mode in ("fused", "strided", "strided_misaligned"):
            if mode == "fused":
                q, pad = 2 * H * dk, 0
            else:
                q, pad = 8 * H + (mode == "strided_misaligned"), 5
            W = q + H * dk + H * dv + pad
            where = {"k": ("kv", q, W, dk), "v": ("kv", q + H * dk, W, dv)}
            sizes = {"kv": T * W}
        else:
            sizes = {}
            for s in "kv":
                if mode == "dense":
                    hs, ts, off = D[s], H * D[s], 0
                elif mode == "padded":
                    hs, ts, off = D[s] + 8, H * (D[s] + 8) + 16, 0
                elif mode == "misaligned":
                    hs, ts, off = D[s] + 1, H * (D[s] + 1) + 3, 1
                else:
                    raise ValueError(mode)
                where[s] = (s, off, ts, hs)
                sizes[s] = off + (T - 1) * ts + (H - 1) * hs + D[s]
        self.bufs = {k: Buf(X, n * es, gen, "random", ROW_TAIL)
                     for k, n in sizes.items()}
        self.where, self.D = where, D
        self.views = {s: self._view(s, False) for s in "kv"}
        if fill == "values":
            for s, start in (("k", 0), ("v", 40000)):
                shape = (T, H, D[s])
                v = X.allbits(shape, dtype, start) if allbits else \
                    X.values(gen, shape, dtype, cache_dtype)
                self.views[s][...] = v
            for b in self.bufs.values():
                b.reset_exp()
        self.exp_views = {s: self._view(s, True) for s in "kv"}

    def _view(self, s, exp):
        key, off, ts, hs = self.where[s]
        b = self.bufs[key]
        return self.X.strided(b.exp if exp else b.raw, LEAD + off * self.es,
                              self.es, (self.T, self.H, self.D[s]),
                              (ts, hs, 1))

    def elem_offsets(self, s, tok, h, e):
        """Element indices (into the buffer's elems) of (token, head,
        element) index arrays."""
        _, off, ts, hs = self.where[s]
        return off + tok * ts + h * hs + e

    def buffer(self, s):
        return self.bufs[self.where[s][0]]

    def check(self, what, dt, loose=None):
        out = []
        for k, b in self.bufs.items():
            lz = None if loose is None else loose.get(k)
            out += b.check(f"{what} ({k} buffer)", self.es, dt, lz)
        return out


class Caches:
    """The cache buffers of one case (KVCase / CopyBlocksCase: layout,
    strides(side), v_offset, value_cache) for nb blocks: which buffer each
    side lives in and at which element, the tensors passed as caches."""

    def __init__(self, X, case, nb, gen, tail, sparse_min=None):
        self.X, self.case, self.nb = X, case, nb
        lay = self.lay = case.layout
        es = self.es = ESIZE[lay.dtype]
        self.st = {s: case.strides(s) for s in "kv"}
        ext = {s: self._extent(s) for s in "kv"}
        v_off = getattr(case, "v_offset", None)
        if lay.packed:
            sizes = {"kv": max(ext.values())}
            self.where = {"k": ("kv", 0), "v": ("kv", 0)}
        elif v_off is not None:
            sizes = {"kv": max(ext["k"], v_off + ext["v"])}
            self.where = {"k": ("kv", 0), "v": ("kv", v_off)}
        else:
            sizes = {"k": ext["k"], "v": ext["v"]}
            self.where = {"k": ("k", 0), "v": ("v", 0)}
        self.sparse = sparse_min is not None and \
            sum(sizes.values()) * es >= sparse_min
        self.bufs = {k: Buf(X, n * es, gen, "zero" if self.sparse else
                            "random", tail, self.sparse)
                     for k, n in sizes.items()}
        self.decoy = None
        vc = getattr(case, "value_cache", "none")
        if lay.packed and vc == "decoy":
            self.decoy = Buf(X, self.bufs["kv"].n, gen, "random", tail)
        self.value_cache = vc

    def _extent(self, side):
        """Elements of the side's buffer: to the last element of its last
        block (a chunked side's tensor: num_blocks - 1 blocks, then one
        block's elements)."""
        inner = chunked_dims(self.lay, side)
        if inner is None:
            return R.side_extent(self.lay, side, self.nb, self.st[side])
        return (self.nb - 1) * self.st[side][0] + math.prod(
            n for _, n in inner)

    @property
    def slots(self):
        return self.nb * self.lay.block_size

    def arg(self, side):
        """The tensor passed for the side: from its first byte to the end
        of its buffer's body."""
        name, off = self.where[side]
        b = self.bufs[name]
        return b.raw[LEAD + off * self.es:LEAD + b.n]

    def args(self):
        kc = self.arg("k")
        if not self.lay.packed:
            return kc, self.arg("v")
        if self.value_cache == "decoy":
            return kc, self.decoy.body()
        if self.value_cache == "same":
            return kc, kc
        return kc, None

    def buffer(self, side):
        return self.bufs[self.where[side][0]]

    def elems(self, side, exp=True):
        return self.buffer(side).elems(self.es, exp)

    def offsets(self, side, slots):
        """[n, H, D] element indices (into elems(side)) of the rows of
        `slots` (X int64, all valid)."""
        X, lay = self.X, self.lay
        b, t, h = self.st[side]
        bs = lay.block_size
        blk = slots // bs
        tok = slots - blk * bs
        inner = chunked_dims(lay, side)
        if inner is not None:
            return (blk * b + self.where[side][1]).reshape(-1, 1, 1) + \
                chunked_block_offsets(X, inner, lay.x, tok, lay.heads,
                                      lay.head_size(side))
        row = blk * b + tok * t + self.where[side][1]
        heads = X.arange(lay.heads) * h
        cols = X.arange(lay.head_size(side)) + lay.base(side)
        return (row.reshape(-1, 1, 1) + heads.reshape(1, -1, 1) +
                cols.reshape(1, 1, -1))

    def check(self, what, loose=None):
        """loose: {buffer name: sorted element indices} (see Buf.check)."""
        out = []
        for k, b in self.bufs.items():
            lz = None if loose is None else loose.get(k)
            out += b.check(f"{what}: cache buffer {k}", self.es,
                           self.lay.dtype, lz)
        if self.decoy is not None:
            out += self.decoy.check(f"{what}: the value_cache a packed "
                                    "layout must ignore", 1, "f8E4M3FN")
        return out

    def adopt(self, loose):
        for k, idx in (loose or {}).items():
            self.bufs[k].adopt(self.es, idx)


def chunked_dims(lay, side):
    """The dimensions inside one block of a chunked layout's side tensor
    (cases.ChunkedLayout.inner_dims: ((name, size), ...), outermost
    first), or None for the other layouts."""
    f = getattr(lay, "inner_dims", None)
    return None if f is None else f(side)


def chunked_block_offsets(X, inner, x, tok, heads, D):
    """[n, H, D] element offsets inside their block of (token tok [n],
    every head, every element) in a dense C-order tensor of the dimensions
    `inner`: the row-major index of the tensor's subscripts (the token's
    and the element's split at x where the tensor splits them), written
    from the shape alone, not from the strides given to kvgen."""
    t = tok.reshape(-1, 1, 1)
    h = X.arange(heads).reshape(1, -1, 1)
    e = X.arange(D).reshape(1, 1, -1)
    sub = {"t": t, "t/x": t // x, "t%x": t % x, "h": h, "e": e,
           "e/x": e // x, "e%x": e % x}
    off = 0
    for name, n in inner:
        off = off * n + sub[name]
    return off


CHUNK_TOKENS = 4096  # rows per step of the reference (bounds its memory)


def scatter(X, caches, side, vslots, vals, loose):
    """exp rows of `vslots` := vals ([n, H, D] cache bits); records the
    element indices where vals is NaN in loose[buffer]."""
    dst = caches.elems(side)
    name = caches.where[side][0]
    dt = caches.lay.dtype
    n = vslots.shape[0]
    for c0 in range(0, n, CHUNK_TOKENS):
        off = caches.offsets(side, vslots[c0:c0 + CHUNK_TOKENS])
        v = vals[c0:c0 + CHUNK_TOKENS]
        dst[off.reshape(-1)] = v.reshape(-1)
        nan = X.nonzero(X.isnan(v, dt))
        if loose is not None and nan.shape[0]:
            loose.setdefault(name, []).append(off.reshape(-1)[nan])


def gather_rows(X, caches, side, vslots):
    """The exp cache bits [n, H, D] of the rows of vslots."""
    src = caches.elems(side)
    parts = []
    for c0 in range(0, vslots.shape[0], CHUNK_TOKENS):
        off = caches.offsets(side, vslots[c0:c0 + CHUNK_TOKENS])
        parts.append(src[off.reshape(-1)].reshape(off.shape))
    if not parts:
        H, D = caches.lay.heads, caches.lay.head_size(side)
        return src[X.arange(0)].reshape(0, H, D)
    return parts[0] if len(parts) == 1 else _cat_rows(X, parts)


def _cat_rows(X, parts):
    if X.name == "numpy":
        return np.concatenate(parts)
    return X.torch.cat(parts)


def finish_loose(X, loose):
    """{buffer: [index arrays]} -> {buffer: sorted unique indices}."""
    return {k: X.sort(X.unique(X.cat(v))) for k, v in loose.items()}


#---------------------------------------------------------------------------
# Slots
#---------------------------------------------------------------------------

def num_blocks_for(case, T):
    nb = case.num_blocks or max(-(-3 * T // (2 * case.layout.block_size)),
                                2) + 2
    return max(nb, case.min_block + 2)


def make_slots(case, T, nb, rng, caches):
    """(slots int64 numpy [T], out-of-range token indices). Distinct
    valid slots from block case.min_block on; the first two tokens take the
    last and the first of them; tokens t % 7 == 3 are padding (the first
    one very negative); big cases start with every slot of the blocks at
    the 2^31 / 2^32 byte edges; oob adds slots past the cache."""
    bs = case.layout.block_size
    n = nb * bs
    lo = case.min_block * bs
    if case.big:
        chosen, near = [], []
        for side in ("k", "v"):
            name, off = caches.where[side]
            blk_bytes = caches.st[side][0] * caches.es
            for edge in (1 << 31, 1 << 32):
                b0 = (edge - off * caches.es) // blk_bytes
                for b, to in ((b0, chosen), (b0 - 1, near), (b0 + 1, near)):
                    if 0 <= b < nb:
                        to.extend(range(b * bs, (b + 1) * bs))
        chosen = list(dict.fromkeys(chosen + near +
                                    list(range((nb - 2) * bs, n))))[:T]
        taken = set(chosen)
        while len(chosen) < T:
            for s in rng.integers(lo, n, size=2 * T):
                s = int(s)
                if s not in taken:
                    taken.add(s)
                    chosen.append(s)
                    if len(chosen) == T:
                        break
        slots = np.array(chosen, np.int64)
        rng.shuffle(slots)
    else:
        first = [n - 1, lo][:min(T, 2)]
        rest = rng.choice(n - lo - 2, size=T - len(first),
                          replace=False) + lo + 1
        slots = np.concatenate([np.array(first, np.int64),
                                rest.astype(np.int64)])
    if T > 3:
        slots[3::7] = -1
        if T > 4:
            slots[3] = -(1 << 31) if case.slots == "i32" else -(1 << 40)
    oob = []
    if getattr(case, "oob", False):
        huge = (1 << 31) - 1 if case.slots == "i32" else (1 << 40)
        vals = [n, huge, n + 7 * bs, n + 1, n + bs - 1]
        cands = [t for t in (5, 6, 11, 20, 41, *range(100, T, 97))
                 if t < T and t % 7 != 3]
        for i, t in enumerate(cands):
            slots[t] = vals[i % len(vals)]
            oob.append(t)
    return slots, oob


#---------------------------------------------------------------------------
# reshape_and_cache + gather of one KVCase at one T
#---------------------------------------------------------------------------

def run_kv_case(backend, case, T):
    """Runs the case's write, raw gather and dequantizing gather; returns
    the list of failed checks (empty: all passed) and the number made."""
    X = backend.X
    lay = case.layout
    dt, io, dq_io = lay.dtype, case.io, case.dq_io
    H = lay.heads
    fails, checks = [], [0]

    def check(msgs):
        checks[0] += 1
        fails.extend(msgs)

    ks = case.kernels()
    kernels = {role: backend.kernel(spec) for role, spec in ks.items()}
    seed = seed_of(case.name, T)
    gen, rng = X.gen(seed), np.random.default_rng(seed)
    nb = num_blocks_for(case, T)
    caches = Caches(X, case, nb, gen, backend.slack, backend.sparse_min)
    fp8 = dt in FP8
    scale = {"k": None, "v": None}
    kscale = vscale = None
    if fp8:
        n = H if lay.scale == "per_head" else 1
        sk = rng.uniform(0.02, 2.0, n).astype(np.float32)
        sv = rng.uniform(0.02, 2.0, n).astype(np.float32)
        kscale, vscale = X.floats(sk), X.floats(sv)
        scale = {s: R.scale_for_rows(a, lay.scale, H)
                 for s, a in (("k", sk), ("v", sv))}
    inp = Rows(X, gen, T, H, lay.hk, lay.hv, io, case.inputs, "values",
               dt, case.allbits)
    slots_np, oob = make_slots(case, T, nb, rng, caches)
    sdt = np.int32 if case.slots == "i32" else np.int64

    def valid_of(s):
        v = np.nonzero((s >= 0) & (s < caches.slots))[0]
        return X.upload(v.astype(np.int64)), X.upload(s[v].astype(np.int64))

    slots = X.upload(slots_np.astype(sdt))
    vtok, vslots = valid_of(slots_np)
    flag = X.zeros_i32(4) if case.checked else None
    dyn = ((case.strides("k"), case.strides("v"))
           if lay.has_dynamic() else None)
    kc, vc = caches.args()

    def check_flag(what, want):
        if flag is None:
            return
        got = X.download(flag)
        check([] if (got[0] == want and not got[1:].any()) else
              [f"{what}: error_flag = {list(got)}, want [{want}, 0, 0, 0]"])
        X.fill(flag, 0)

    # 1. reshape_and_cache.
    w = kernels["write"]
    backend.launch(lambda: w.reshape_and_cache(
        inp.views["k"], inp.views["v"], kc, vc, slots, k_scale=kscale,
        v_scale=vscale, num_blocks=nb, error_flag=flag, cache_strides=dyn))
    strict = io == dt
    loose = {}
    for s in "kv":
        vals = X.to_cache(X.rows_at(inp.views[s], vtok), io, dt, scale[s])
        scatter(X, caches, s, vslots, vals, None if strict else loose)
    loose = finish_loose(X, loose)
    wrote = caches.check("reshape_and_cache", None if strict else loose)
    check(wrote)
    check(inp.check("reshape_and_cache: the key/value inputs", io))
    check_flag("reshape_and_cache", 1 if oob else 0)
    caches.adopt(loose)
    if wrote and not caches.sparse:
        # Reported; the gathers are checked against what the cache holds.
        for b in caches.bufs.values():
            b.reset_exp()

    def run_gather(role, gslots_np, out_dt, dequantize):
        k = kernels[role]
        gslots = X.upload(gslots_np.astype(sdt))
        gtok, gvs = valid_of(gslots_np)
        out = Rows(X, gen, T, H, lay.hk, lay.hv, out_dt, case.out_mode)
        backend.launch(lambda: k.gather(
            kc, vc, gslots, out.views["k"], out.views["v"],
            k_scale=kscale if dequantize else None,
            v_scale=vscale if dequantize else None, num_blocks=nb,
            error_flag=flag, cache_strides=dyn))
        raw_copy = not dequantize or (dt == out_dt and not fp8)
        gloose = {}
        for s in "kv":
            cbits = gather_rows(X, caches, s, gvs)
            vals = X.to_output(cbits, dt, out_dt, dequantize, scale[s])
            out.exp_views[s][gtok] = vals
            if not raw_copy:
                nan = X.nonzero(X.isnan(vals, out_dt))
                if nan.shape[0]:
                    D = lay.head_size(s)
                    t_i = gtok[nan // (H * D)]
                    h_i = (nan // D) % H
                    e_i = nan % D
                    gloose.setdefault(out.where[s][0], []).append(
                        out.elem_offsets(s, t_i, h_i, e_i))
        what = f"{role} ({'dequantize to ' + out_dt if dequantize else 'raw'})"
        check(out.check(f"{what}: output", out_dt,
                        None if raw_copy else finish_loose(X, gloose)))
        check(caches.check(f"{what}: the caches must stay unchanged"))
        return gslots

    # 2. Raw gather of the written slots: exactly what was stored.
    run_gather("gather", slots_np, dt, False)
    check_flag("gather", 1 if oob else 0)
    # 3. Dequantizing gather of fresh slots (written and unwritten rows).
    slots2, oob2 = make_slots(case, T, nb, np.random.default_rng(seed + 1),
                              caches)
    run_gather("gather_dq", slots2, dq_io, True)
    check_flag("gather_dq", 1 if oob2 else 0)
    # 4. Checked kernels given only in-range slots leave the flag at 0 (and
    #    the rewrite of the same rows changes nothing).
    if case.checked and oob:
        ok = slots_np.copy()
        ok[oob] = -1
        okd = X.upload(ok.astype(sdt))
        backend.launch(lambda: w.reshape_and_cache(
            inp.views["k"], inp.views["v"], kc, vc, okd, k_scale=kscale,
            v_scale=vscale, num_blocks=nb, error_flag=flag,
            cache_strides=dyn))
        check(caches.check("checked reshape_and_cache, in-range slots"))
        check_flag("checked reshape_and_cache, in-range slots", 0)
        for role, dq in (("gather", False), ("gather_dq", True)):
            out = Rows(X, gen, T, H, lay.hk, lay.hv,
                       dq_io if dq else dt, case.out_mode)
            backend.launch(lambda: kernels[role].gather(
                kc, vc, okd, out.views["k"], out.views["v"],
                k_scale=kscale if dq else None,
                v_scale=vscale if dq else None, num_blocks=nb,
                error_flag=flag, cache_strides=dyn))
            check_flag(f"checked {role}, in-range slots", 0)
    if caches.sparse or case.big:
        X.free()
    return fails, checks[0]
