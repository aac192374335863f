"""From cache tensors (views) to a kvgen layout: shapes, element sizes,
pointers and strides in, layout text and launch constants out.

Used by kvgen.torch; works on any object with .shape, .stride(),
.element_size() and .data_ptr() (torch tensors), so it has no torch import.

A cache side is a 4-D view [num_blocks, block_size, num_kv_heads,
head_size] whose last dimension is contiguous (stride 1); its other strides
(elements) are the layout's (block, token, head) strides:

* NHD dense  (b, t, h) = (bs*H*w, H*w, w)      -> order = nhd
* HND dense  (b, t, h) = (H*bs*w, w, bs*w)     -> order = hnd (a permute of
  a [nb, H, bs, w] tensor)
* anything else (a [nb, 2, ...] allocation, padded blocks, ...) -> explicit
  k_strides / v_strides
where w is the row width: the head size, or head_size_k + head_size_v when
K and V are the two halves of one packed row (same strides, and V's pointer
is K's plus head_size_k elements) -> packing = packed.
The layout rules (no overlap, positive block stride, ...) are the runtime's
(kvgen_layout_parse); a view they reject raises ValueError with that
message. Source of the formulas: docs/layout.md ("Dense strides").

vLLM's legacy pair (key_cache [num_blocks, H, Dk/x, block_size, x],
value_cache [num_blocks, H, Dv, block_size]) is LegacyCacheGeometry: the
same layout with chunked K rows (k_elem_chunks) and V elements block_size
apart (v_elem_stride), from the tensors' strides; with shuffled_v it also
takes ROCm aiter's shuffled value_cache [num_blocks, H, block_size / x, Dv,
x] (v_token_chunks, v_elem_stride = x).

K and V must not share an element (CacheGeometry.check_disjoint, run when
the geometry is derived and by kvgen.torch on every call that is not
launched from a remembered plan of the same cache pointers): the byte
ranges [ptr, ptr + span) of the two views may intersect only where the
views have the same (block, token, head) strides and no K row meets a V
row (decided exactly: e.g. column ranges of one tensor that do not
intersect, the halves of a [num_blocks, 2, ...] allocation); otherwise
ValueError "key_cache and value_cache overlap: ...", the wording of the
numpy binding (kvgen._check_cache_aliasing).
"""

from . import Layout

#: torch dtype name -> kvgen float dtype of token rows / caches.
FLOAT_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}
FP8_TORCH = {"float8_e4m3fn": "f8E4M3FN", "float8_e4m3fnuz": "f8E4M3FNUZ",
             "float8_e5m2": "f8E5M2", "float8_e5m2fnuz": "f8E5M2FNUZ"}
#: vLLM's kv_cache_dtype strings -> (fp8 family, kvgen dtype for raw caches)
KV_CACHE_DTYPES = {"fp8": ("e4m3", "f8E4M3FN"), "fp8_e4m3": ("e4m3", "f8E4M3FN"),
                   "fp8_e5m2": ("e5m2", "f8E5M2")}


def dtype_name(t):
    return str(t.dtype).replace("torch.", "")


def span_bytes(shape, strides, itemsize):
    """Bytes from a view's first element to the end of its last."""
    if any(n == 0 for n in shape):
        return 0
    if any(s < 0 for s in strides):
        raise ValueError("negative strides are not supported")
    return (sum((n - 1) * s for n, s in zip(shape, strides)) + 1) * itemsize


def side_strides(what, shape, strides, dense):
    """(b, t, h) of a [nb, bs, H, D] view with dims of size 1 given their
    dense stride (never used to address, and torch leaves them arbitrary)."""
    if len(shape) != 4:
        raise ValueError(f"{what}: shape {list(shape)}, need 4 dims "
                         "[num_blocks, block_size, num_kv_heads, head_size]")
    if shape[3] > 1 and strides[3] != 1:
        raise ValueError(f"{what}: the last dimension (head_size) must be "
                         f"contiguous (stride {strides[3]}, need 1)")
    return tuple(d if n == 1 else s
                 for n, s, d in zip(shape[:3], strides[:3], dense))


def rows_meet(delta, strides, sizes, wk, wv, budget=1 << 17):
    """Whether rows r1 + [0, wk) and delta + r2 + [0, wv) meet for some r1,
    r2 in R = {sum(x_i * s_i) : 0 <= x_i < n_i} (one unit throughout, e.g.
    bytes; strides > 0): True / False, exactly, or None when deciding it
    would take more than `budget` steps (or a stride is not positive).
    They meet iff some difference r1 - r2 = sum(k_i * s_i), |k_i| < n_i,
    lies in (delta - wk, delta + wv): the k of the dimension with the most
    values is solved for, the others enumerated."""
    dims = sorted((n, s) for n, s in zip(sizes, strides) if n > 1)
    lo, hi = delta - wk, delta + wv  # exclusive bounds of r1 - r2
    if not dims:
        return lo < 0 < hi
    if any(s <= 0 for _, s in dims):
        return None
    *rest, (n, s) = dims
    count = 1
    for m, _ in rest:
        count *= 2 * m - 1
    if count > budget:
        return None
    offsets = [0]
    for m, st in rest:
        offsets = [o + k * st for o in offsets for k in range(1 - m, m)]
    for o in offsets:
        # Some k in [1 - n, n - 1] with lo - o < k * s < hi - o?
        kmin = max((lo - o) // s + 1, 1 - n)
        kmax = min(-((o - hi) // s) - 1, n - 1)
        if kmin <= kmax:
            return True
    return False


def dense_strides(order, bs, heads, width):
    if order == "nhd":
        return (bs * heads * width, heads * width, width)
    return (heads * bs * width, width, bs * width)


class CacheGeometry:
    """The layout of a K/V cache pair and what a launch needs of it.

    Attributes: text (the layout, as kvgen_layout_parse reads it), layout
    (kvgen.Layout), packed, num_blocks, block_size, num_kv_heads,
    key_bytes / value_bytes (buffer sizes for the runtime's extent check,
    measured from each side's pointer; value 0 when packed).

    Raises ValueError when the two views share memory (check_disjoint, with
    the views' own pointers); a caller that reuses the geometry for other
    tensors of the same shapes, strides and dtypes calls check_disjoint
    with their pointers.
    """

    def __init__(self, key_cache, value_cache, dtype, scale,
                 allow_packed=True):
        ks, vs = tuple(key_cache.shape), tuple(value_cache.shape)
        kst, vst = tuple(key_cache.stride()), tuple(value_cache.stride())
        if len(ks) != 4 or len(vs) != 4:
            raise ValueError(
                f"key_cache {list(ks)} / value_cache {list(vs)}: need 4-D "
                "[num_blocks, block_size, num_kv_heads, head_size] views")
        if ks[:3] != vs[:3]:
            raise ValueError(
                f"key_cache {list(ks)} and value_cache {list(vs)} differ in "
                "[num_blocks, block_size, num_kv_heads]")
        nb, bs, heads, dk = ks
        dv = vs[3]
        isz = key_cache.element_size()
        if value_cache.element_size() != isz:
            raise ValueError("key_cache and value_cache have different "
                             "element sizes")
        delta = value_cache.data_ptr() - key_cache.data_ptr()
        packed = (allow_packed and kst == vst and delta == dk * isz)
        width = dk + dv if packed else None
        sides = []
        for what, shape, st, d in (("key_cache", ks, kst, dk),
                                   ("value_cache", vs, vst, dv)):
            w = width or d
            sides.append(side_strides(what, shape, st,
                                      dense_strides("nhd", bs, heads, w)))
        kb, vb = sides
        parts = [f"num_kv_heads = {heads}", f"head_size_k = {dk}",
                 f"head_size_v = {dv}", f"block_size = {bs}"]
        order, explicit = None, False
        for o in ("nhd", "hnd"):
            if all(s == dense_strides(o, bs, heads, width or d)
                   for s, d in ((kb, dk), (vb, dv))):
                order = o
                break
        if order is None:
            explicit = True
            order = "hnd" if kb[2] > kb[1] else "nhd"
        parts += [f"order = {order}",
                  f"packing = {'packed' if packed else 'separate'}",
                  f"dtype = {dtype}", f"scale = {scale}"]
        if explicit:
            parts.append("k_strides = [" + ", ".join(map(str, kb)) + "]")
            if not packed:
                parts.append("v_strides = [" + ", ".join(map(str, vb)) + "]")
        self._parse(", ".join(parts), kst, vst)
        self.packed = packed
        self.num_blocks, self.block_size, self.num_kv_heads = nb, bs, heads
        kspan = span_bytes(ks, kst, isz)
        vspan = span_bytes(vs, vst, isz)
        if packed:
            self.key_bytes = max(kspan, delta + vspan)
            self.value_bytes = 0
        else:
            self.key_bytes, self.value_bytes = kspan, vspan
        # What check_disjoint needs (bytes): each view's span from its
        # pointer, and, where K and V rows sit at the same offsets (equal
        # (b, t, h) strides), the rows' offsets and widths.
        self._spans = (kspan, vspan)
        # (A dimension of size 1 addresses nothing: its stride may differ.)
        same = all(a == b for n, a, b in zip((nb, bs, heads), kb, vb)
                   if n > 1)
        self._rows = ((tuple(x * isz for x in kb), (nb, bs, heads),
                       dk * isz, dv * isz) if same else None)
        self._disjoint = set()  # pointer differences proven disjoint
        self.check_disjoint(key_cache.data_ptr(), value_cache.data_ptr())

    def _parse(self, text, kst, vst):
        """Sets text and layout (ValueError naming the views' strides when
        the runtime refuses the layout)."""
        self.text = text
        try:
            self.layout = Layout.parse(text)
        except ValueError as e:
            raise ValueError(
                "kvgen: the cache views cannot be expressed as a kvgen "
                f"layout (key_cache strides {list(kst)}, value_cache strides "
                f"{list(vst)}, derived layout '{text}'): {e}") from None

    def check_disjoint(self, key_ptr, value_ptr):
        """Raises ValueError when views of this geometry at key_ptr and
        value_ptr may share an element: their byte ranges [ptr, ptr + span)
        intersect and either their (block, token, head) strides differ (not
        decided: refused) or some K row meets a V row (decided exactly by
        rows_meet; a difference found disjoint is remembered)."""
        d = value_ptr - key_ptr  # bytes from K's first element to V's
        kspan, vspan = self._spans
        if d >= kspan or -d >= vspan or d in self._disjoint:
            return
        meet = None
        if self._rows is not None:
            strides, sizes, wk, wv = self._rows
            meet = rows_meet(d, strides, sizes, wk, wv)
        if meet is False:
            if len(self._disjoint) >= 64:
                self._disjoint.clear()
            self._disjoint.add(d)
            return
        if d >= 0:
            where = (f"value_cache starts {d} bytes after key_cache, inside "
                     f"its {kspan}-byte span")
        else:
            where = (f"key_cache starts {-d} bytes after value_cache, "
                     f"inside its {vspan}-byte span")
        why = ("the same element is in both (e.g. one tensor passed as "
               "both, or column ranges of one tensor that intersect)"
               if meet else
               "their (block, token, head) strides differ, so their "
               "elements are not proven disjoint")
        raise ValueError(
            f"kvgen: key_cache and value_cache overlap: {where} of "
            f"{self.num_blocks} blocks; {why}; K and V of layout "
            f"{self.text} need disjoint memory")


#: Bytes per chunk of vLLM's legacy key cache: x = LEGACY_CHUNK_BYTES //
#: element size elements (8 for bf16 / f16, 16 for fp8, 4 for f32).
LEGACY_CHUNK_BYTES = 16


def legacy_dims(key_cache, value_cache, names=("key_cache", "value_cache"),
                shuffled_v=False, prefix="kvgen"):
    """(num_kv_heads, head_size_k, head_size_v) of vLLM's legacy cache
    pair: key_cache [num_blocks, H, Dk / x, block_size, x], value_cache
    [num_blocks, H, Dv, block_size]; with shuffled_v, value_cache may also
    be ROCm aiter's shuffled [num_blocks, H, block_size / x, Dv, x].
    Checks the dimensions only (x against the element size:
    legacy_chunk); ValueError "<prefix>: <name> ...", names being the
    caller's argument names for (key_cache, value_cache)."""
    kn, vn = names
    ks, vs = list(key_cache.shape), list(value_cache.shape)
    if len(ks) != 5:
        raise ValueError(f"{prefix}: {kn} has shape {ks}, need 5 dims "
                         "[num_blocks, num_kv_heads, head_size / x, "
                         "block_size, x] (vLLM's legacy key cache)")
    if len(vs) != 4 and not (shuffled_v and len(vs) == 5):
        aiter = (" or 5 dims [num_blocks, num_kv_heads, block_size / x, "
                 "head_size, x] (aiter's shuffled value cache)"
                 if shuffled_v else "")
        raise ValueError(f"{prefix}: {vn} has shape {vs}, need 4 dims "
                         "[num_blocks, num_kv_heads, head_size, block_size] "
                         f"(vLLM's legacy value cache){aiter}")
    if ks[:2] != vs[:2]:
        raise ValueError(f"{prefix}: {kn} {ks} and {vn} {vs} differ "
                         "in [num_blocks, num_kv_heads]")
    if len(vs) == 5:
        if ks[3] != vs[2] * vs[4]:
            raise ValueError(
                f"{prefix}: {kn} {ks} has block_size {ks[3]} (dim 3), {vn} "
                f"{vs} {vs[2]} x {vs[4]} = {vs[2] * vs[4]} (dims 2 and 4)")
        return ks[1], ks[2] * ks[4], vs[3]
    if ks[3] != vs[3]:
        raise ValueError(f"{prefix}: {kn} {ks} has block_size {ks[3]} "
                         f"(dim 3), {vn} {vs} {vs[3]} (dim 3)")
    return ks[1], ks[2] * ks[4], vs[2]


def legacy_chunk(key_cache, value_cache=None,
                 names=("key_cache", "value_cache"), prefix="kvgen"):
    """x of a legacy key cache: 16 bytes of its elements; ValueError when
    its last dimension is not x, or when value_cache is given, has 5 dims
    (aiter's shuffled value cache) and its last dimension is not x."""
    isz = key_cache.element_size()
    x = LEGACY_CHUNK_BYTES // isz
    for t, name, form in (
            (key_cache, names[0], "vLLM's legacy key cache [num_blocks, "
             "num_kv_heads, head_size / x, block_size, x]"),
            (value_cache, names[1], "aiter's shuffled value cache "
             "[num_blocks, num_kv_heads, block_size / x, head_size, x]")):
        if t is not None and len(t.shape) == 5 and t.shape[4] != x:
            raise ValueError(
                f"{prefix}: {name} has shape {list(t.shape)}: its last "
                f"dimension must be x = {LEGACY_CHUNK_BYTES} bytes / "
                f"{isz}-byte elements = {x} ({form})")
    return x


class LegacyCacheGeometry(CacheGeometry):
    """CacheGeometry of vLLM's legacy paged cache (legacy_dims): a
    separate layout whose K rows are split into chunks of x elements
    (k_elem_chunks = [x, chunk stride]) with the token between chunk and
    element, and whose V elements are block_size apart (v_elem_stride):

        K strides s (elements)  -> k_strides = [s0, s3, s1],
                                   k_elem_chunks = [x, s2],
                                   k_elem_stride = s4 (when not 1)
        V strides s             -> v_strides = [s0, s3, s1],
                                   v_elem_stride = s2

    With shuffled_v, a 5-D value_cache is ROCm aiter's shuffled V
    [num_blocks, H, block_size / x, Dv, x], its tokens in chunks of x:

        V strides s             -> v_strides = [s0, s4, s1],
                                   v_token_chunks = [x, s2],
                                   v_elem_stride = s3

    (dimensions of size 1 take their dense stride). Any strides the
    runtime proves (e.g. a [2, num_blocks, ...] allocation's halves,
    blocks padded with tokens) are served; others raise ValueError naming
    the strides. K and V must not share bytes (check_disjoint: the strides
    differ, so any intersection of the spans is refused). names / prefix:
    the caller's argument names and message prefix (legacy_dims)."""

    def __init__(self, key_cache, value_cache, dtype, scale,
                 shuffled_v=False, names=("key_cache", "value_cache"),
                 prefix="kvgen"):
        heads, dk, dv = legacy_dims(key_cache, value_cache, names,
                                    shuffled_v, prefix)
        x = legacy_chunk(key_cache, value_cache, names, prefix)
        ks, vs = tuple(key_cache.shape), tuple(value_cache.shape)
        kst, vst = tuple(key_cache.stride()), tuple(value_cache.stride())
        isz = key_cache.element_size()
        if value_cache.element_size() != isz:
            raise ValueError(f"{prefix}: {names[0]} and {names[1]} have "
                             "different element sizes")
        nb, _, chunks, bs, _ = ks
        dense_k = (heads * chunks * bs * x, chunks * bs * x, bs * x, x, 1)
        if len(vs) == 5:  # aiter's [nb, H, bs / x, Dv, x]
            dense_v = (heads * dv * bs, dv * bs, dv * x, x, 1)
        else:
            dense_v = (heads * dv * bs, dv * bs, bs, 1)
        k = [d if n == 1 else s for n, s, d in zip(ks, kst, dense_k)]
        v = [d if n == 1 else s for n, s, d in zip(vs, vst, dense_v)]
        parts = [f"num_kv_heads = {heads}", f"head_size_k = {dk}",
                 f"head_size_v = {dv}", f"block_size = {bs}",
                 "order = hnd", "packing = separate", f"dtype = {dtype}",
                 f"scale = {scale}",
                 f"k_strides = [{k[0]}, {k[3]}, {k[1]}]",
                 f"k_elem_chunks = [{x}, {k[2]}]"]
        if k[4] != 1:
            parts.append(f"k_elem_stride = {k[4]}")
        if len(vs) == 5:
            parts += [f"v_strides = [{v[0]}, {v[4]}, {v[1]}]",
                      f"v_token_chunks = [{x}, {v[2]}]",
                      f"v_elem_stride = {v[3]}"]
        else:
            parts += [f"v_strides = [{v[0]}, {v[3]}, {v[1]}]",
                      f"v_elem_stride = {v[2]}"]
        self._parse(", ".join(parts), kst, vst)
        self.packed = False
        self.num_blocks, self.block_size, self.num_kv_heads = nb, bs, heads
        self.key_bytes = span_bytes(ks, kst, isz)
        self.value_bytes = span_bytes(vs, vst, isz)
        self._spans = (self.key_bytes, self.value_bytes)
        self._rows = None  # K's and V's strides differ
        self._disjoint = set()
        self.check_disjoint(key_cache.data_ptr(), value_cache.data_ptr())
