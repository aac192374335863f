"""The one case list of the grid harness: every kernel case the harness
runs, on every backend (host in CI, cuda on the GPU), and the kernels each
needs. Pure data: importing this module needs neither the runtime library
nor torch, so emit_bundle.py (on the machine with the MLIR build) and the
tests (on any machine) derive the same kernel specs from it.

A case is a frozen dataclass with
  name, group     its id (unique within its op) and a group for the summary
  params()        ((T, marks), ...): one test item per entry (T = tokens or
                  block pairs); marks such as pytest's memcheck marker are
                  added by the tests
  kernels()       {role: KSpec}: every kernel the case launches
and each op has a list: KV_CASES (reshape_and_cache + gather),
COPY_BLOCKS_CASES. all_specs() is the union the bundle must hold.

Adding an op's cases (e.g. swap_blocks): a dataclass here with name, group,
kernels() and the fields its test needs, a list OP_CASES, an entry in
CASE_LISTS, and a test module test_<op>.py next to this one whose test takes
(backend, case, T); see README.md next to this file.

Layouts are kvgen_ref.Layout values (the reference's own model, independent
of kvgen); a kernel's layout is that model's `#kv.layout<...>` text.
"""

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# The numpy reference's model (Layout) and its dtypes.
from kvgen_ref import DTYPES, Layout  # noqa: E402

REPO = Path(__file__).resolve().parents[3]

FP8_DTYPES = ("f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E5M2FNUZ")


#---------------------------------------------------------------------------
# Kernel specs
#---------------------------------------------------------------------------

@dataclass(frozen=True)
class KSpec:
    """One kernel: op, layout (`#kv.layout<...>` text) and its options
    ((name, value) pairs, every option of the op given; flags as bool).
    The arguments of Context.kernel(op, layout, **options) and of
    `kvgen emit --op OP --NAME VALUE / --FLAG`."""
    op: str
    layout: str
    options: Tuple[Tuple[str, object], ...]

    def opts(self) -> Dict[str, object]:
        return dict(self.options)

    def emit_args(self):
        """`kvgen emit` flags after --layout/--target."""
        a = ["--op", self.op]
        for k, v in self.options:
            if isinstance(v, bool):
                if v:
                    a.append(f"--{k}")
            else:
                a += [f"--{k}", str(v)]
        return a

    def __str__(self):
        o = ", ".join(f"{k}={v}" for k, v in self.options)
        return f"{self.op}({o}) {self.layout}"


def kspec(op, layout: Layout, **options) -> KSpec:
    return KSpec(op, layout.mlir(), tuple(options.items()))


# Every launch option of the write/gather cases is set here and only here.
# Kernels are range-checked by default (issue 12); `checked` cases run the
# default kernels (and pass an error_flag), the others the `unchecked` ones,
# so the grid covers both.
def write_spec(layout, io, slots, checked):
    return kspec("reshape_and_cache", layout, io=io, slots=slots,
                 unchecked=not checked)


def gather_spec(layout, io, slots, checked, dequantize):
    return kspec("gather", layout, io=io, slots=slots, dequantize=dequantize,
                 unchecked=not checked)


def copy_blocks_spec(layout, checked):
    return kspec("copy_blocks", layout, unchecked=not checked)


#---------------------------------------------------------------------------
# reshape_and_cache + gather
#---------------------------------------------------------------------------

# Input row views (harness.row_views): K/V rows [T, H, D] of the io dtype
#   dense               two tensors [T, H, D]
#   fused               one qkv buffer: token stride 2H*Dk + H*Dk + H*Dv
#                       (16-byte aligned rows)
#   strided             one [T, W] buffer, W = 8H + H*Dk + H*Dv + 5 (odd:
#                       rows of odd tokens are not 16-byte aligned)
#   strided_misaligned  as strided, K one element further in
#   padded              head stride D + 8, token stride H*(D + 8) + 16
#   misaligned          head stride D + 1, token stride H*(D + 1) + 3,
#                       first element at 1 (the one-element path)
ROW_MODES = ("dense", "fused", "strided", "strided_misaligned", "padded",
             "misaligned")
# Gather outputs when a case names none: start as random bits, views like
# the inputs' (aligned where the inputs were).
OUT_MODE = {"dense": "dense", "fused": "padded", "strided": "strided",
            "strided_misaligned": "strided", "padded": "padded",
            "misaligned": "misaligned"}


@dataclass(frozen=True)
class KVCase:
    """One cache geometry + kernel flavour, run for each T in Ts: a write
    (reshape_and_cache), a raw gather of the written slots and a
    dequantizing gather (to gather_io) of fresh slots, each compared bit
    for bit with the reference over whole buffers (harness.run_kv_case).

    layout        the kernels' layout (strides '?' = dynamic)
    real_strides  {'k': (b, t, h), 'v': ...} of the buffers when the
                  layout's are dynamic; default: the layout's
    v_offset      K and V in one buffer, V starting v_offset elements in
    value_cache   packed layouts: what is passed as value_cache ('none',
                  'decoy': a buffer that must stay untouched, 'same': the
                  key cache)
    num_blocks    default: about 1.5 T / block_size (+ 2)
    min_block     slots only from this block on (block ids > 65535)
    big           slots at the 2^31 and 2^32 byte edges of each cache
    oob           checked kernels: some slots >= num_blocks * block_size
    allbits       inputs: every non-NaN 16-bit pattern of io in order
    memcheck      part of the compute-sanitizer subset (its T <= 300)
    backends      the backends that run it (None: every one; the others
                  deselect its items)
    """
    name: str
    group: str
    layout: Layout
    io: str = "bf16"
    gather_io: Optional[str] = None  # default: io
    slots: str = "i64"
    checked: bool = False
    Ts: Tuple[int, ...] = (42,)
    inputs: str = "dense"
    outputs: Optional[str] = None
    real_strides: Optional[Tuple[Tuple[str, Tuple[int, int, int]], ...]] = None
    v_offset: Optional[int] = None
    value_cache: str = "none"
    num_blocks: Optional[int] = None
    min_block: int = 0
    big: bool = False
    oob: bool = False
    allbits: bool = False
    memcheck: bool = False
    backends: Optional[Tuple[str, ...]] = None

    def __post_init__(self):
        assert self.inputs in ROW_MODES, self.inputs
        assert not self.oob or self.checked
        assert not self.allbits or self.io in ("bf16", "f16")

    @property
    def out_mode(self):
        return self.outputs or OUT_MODE[self.inputs]

    @property
    def dq_io(self):
        return self.gather_io or self.io

    def strides(self, side):
        """Element strides (block, token, head) of the side's buffer."""
        if self.real_strides is not None:
            return dict(self.real_strides)[side]
        return self.layout.declared_strides(side)

    def memcheck_Ts(self):
        return tuple(t for t in self.Ts if t <= 300)[:2] if self.memcheck \
            else ()

    def params(self):
        return tuple((T, T in self.memcheck_Ts()) for T in self.Ts)

    def kernels(self):
        lay, c = self.layout, self.checked
        return {"write": write_spec(lay, self.io, self.slots, c),
                "gather": gather_spec(lay, lay.dtype, self.slots, c, False),
                "gather_dq": gather_spec(lay, self.dq_io, self.slots, c,
                                         True)}


def _scale(dtype, scale=None):
    return scale or ("per_tensor" if dtype in FP8_DTYPES else "none")


def _lay(H, Dk, Dv, bs, dtype="bf16", order="nhd", packing="separate",
         scale=None, **kw):
    return Layout(H, Dk, Dv, bs, order, packing, dtype, _scale(dtype, scale),
                  **kw)


def combined(lay: Layout):
    """K and V of a block side by side in one [num_blocks, 2, ...] buffer
    (vLLM's): block stride bs*H*(Dk + Dv), V starts bs*H*Dk elements in.
    Returns (layout, case keywords)."""
    H, bs = lay.heads, lay.block_size
    blk = bs * H * (lay.hk + lay.hv)
    if lay.order == "nhd":
        ks, vs = (blk, H * lay.hk, lay.hk), (blk, H * lay.hv, lay.hv)
    else:
        ks, vs = (blk, lay.hk, bs * lay.hk), (blk, lay.hv, bs * lay.hv)
    return lay.replace(k_strides=ks, v_strides=vs), dict(v_offset=bs * H *
                                                         lay.hk)


def padded(lay: Layout, pad_block, pad_token=0, only_k=False):
    """Explicit strides: pad_block extra elements per block, pad_token per
    token (NHD) / per head row (HND)."""
    H, bs = lay.heads, lay.block_size

    def st(side):
        b, t, h = lay.dense_strides(side)
        if lay.order == "nhd":
            t2 = t + pad_token
            return (bs * t2 + pad_block, t2, h)
        h2 = h + bs * pad_token
        return (H * h2 + pad_block, t + pad_token, h2)
    return lay.replace(k_strides=st("k"),
                       v_strides=None if only_k else st("v")), {}


def dynamic(lay_kw, partial=False):
    """The layout of (layout, keywords) with '?' strides (all, or the block
    stride only); its strides become the buffers' real_strides."""
    lay, kw = lay_kw
    real = tuple((s, lay.declared_strides(s)) for s in "kv")
    packed_v = lay.packed
    if partial:
        ks = (None, *lay.declared_strides("k")[1:])
        vs = None if packed_v else (None, *lay.declared_strides("v")[1:])
    else:
        ks = (None, None, None)
        vs = None if packed_v else (None, None, None)
    return lay.replace(k_strides=ks, v_strides=vs), dict(kw, real_strides=real)


T_ALL = (1, 7, 42, 300, 4096, 65536)


def _mimo(name, group, bs=16, dtype="bf16", order="nhd", packing="separate",
          scale=None, H=4, **kw):
    return KVCase(name, group, _lay(H, 192, 128, bs, dtype, order, packing,
                                    scale), **kw)


def device_grid_cases():
    """The grid first written for the H200 (scripts/device_grid.py): MiMo
    block sizes, T up to 65536, every cache dtype x scale, allbits, head
    sizes 64..576, io dtypes, misaligned views, checked kernels, explicit /
    dynamic strides, caches past 4 GiB."""
    C = []
    # -- MiMo-V2-Flash full attention: every block size (bf16 nhd).
    for bs in (8, 16, 32, 64, 128, 256):
        C.append(_mimo(f"mimo_b{bs}", "mimo-block", bs=bs, Ts=(42, 300),
                       inputs="strided" if bs in (16, 128) else "dense",
                       slots="i32" if bs in (32, 256) else "i64",
                       memcheck=bs == 8))
    # -- MiMo: T sweep.
    C.append(_mimo("mimo_T_bf16", "mimo-T", Ts=T_ALL, inputs="strided",
                   memcheck=True))
    C.append(_mimo("mimo_T_e4m3_ph_b64", "mimo-T", bs=64, dtype="f8E4M3FN",
                   scale="per_head", Ts=T_ALL))
    C.append(_mimo("mimo_T_packed", "mimo-T", packing="packed",
                   Ts=(1, 300, 65536), inputs="strided"))
    # T past small_max_tokens (13107 for fp8 MiMo on sm_90): the bulk shape
    # with the hardware converts.
    C.append(_mimo("mimo_T_hnd_e4m3", "mimo-T", order="hnd",
                   dtype="f8E4M3FN", Ts=(7, 4096, 16384), slots="i32"))
    C.append(_mimo("mimo_T_e5m2_per_head", "mimo-T", dtype="f8E5M2",
                   scale="per_head", Ts=(16384,)))
    # -- MiMo: every cache dtype x scale kind.
    i = 0
    for dt in FP8_DTYPES:
        for sc in ("per_tensor", "per_head"):
            order = ("nhd", "hnd")[i % 2]
            pack = "packed" if i in (2, 5) else "separate"
            C.append(_mimo(f"mimo_{dt}_{sc}_{order}_{pack}", "mimo-dtype",
                           dtype=dt, scale=sc, order=order, packing=pack,
                           Ts=(300,),
                           inputs="strided" if i % 2 == 0 else "dense",
                           slots="i32" if i % 3 == 0 else "i64",
                           memcheck=(dt == "f8E5M2" and sc == "per_head")))
            i += 1
    # -- Every non-NaN bf16 / f16 bit pattern (inf, subnormals, huge values;
    # NaN: harness.allbits) into each fp8 encoding: the fast and the exact
    # quantizing paths on sm_89+.
    for dt in FP8_DTYPES:
        C.append(_mimo(f"mimo_allbits_{dt}", "allbits", dtype=dt,
                       scale="per_head" if "E5" in dt else "per_tensor",
                       allbits=True, Ts=(52, 205, 16384)))
    C.append(_mimo("mimo_allbits_f16_e4m3fn", "allbits", dtype="f8E4M3FN",
                   io="f16", gather_io="bf16", allbits=True, Ts=(52,)))
    C.append(_mimo("mimo_f16", "mimo-dtype", dtype="f16", io="f16",
                   Ts=(300,), inputs="strided"))
    C.append(_mimo("mimo_f32_hnd", "mimo-dtype", dtype="f32", io="f32",
                   order="hnd", Ts=(300,)))
    # MiMo sliding-window layers: 8 heads.
    C.append(_mimo("mimo_swa_b64", "mimo-dtype", H=8, bs=64,
                   dtype="f8E4M3FN", scale="per_head", Ts=(300,),
                   inputs="strided"))
    # -- Head sizes (symmetric K = V), rotating order / packing / dtype.
    fp8_cycle = ("f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E4M3FN",
                 "f8E5M2FNUZ", "f8E4M3FN", "f8E5M2")
    for j, D in enumerate((64, 80, 96, 112, 128, 192, 256)):
        H = 8 if D in (64, 128) else 4
        order = ("nhd", "hnd")[j % 2]
        C.append(KVCase(f"d{D}_bf16_{order}", "heads",
                        _lay(H, D, D, (16, 32, 64)[j % 3], order=order),
                        Ts=(42,),
                        inputs=("strided_misaligned" if j == 2 else
                                "strided" if j % 2 == 0 else "dense"),
                        outputs="strided" if j % 2 == 0 else "dense",
                        memcheck=D == 80))
        C.append(KVCase(f"d{D}_{fp8_cycle[j]}_packed", "heads",
                        _lay(H, D, D, (64, 16, 32)[j % 3], fp8_cycle[j],
                             ("hnd", "nhd")[j % 2], "packed",
                             ("per_head", "per_tensor")[j % 2]),
                        Ts=(300,),
                        inputs="strided" if j % 2 == 1 else "dense",
                        slots="i32" if j % 2 else "i64",
                        memcheck=D == 112))
    # 576: one symmetric head, and DeepSeek MLA's packed 512 + 64 row.
    C.append(KVCase("d576_bf16", "heads", _lay(1, 576, 576, 16),
                    Ts=(42, 300), inputs="strided"))
    C.append(KVCase("d576_e4m3", "heads", _lay(1, 576, 576, 64, "f8E4M3FN"),
                    Ts=(300,)))
    C.append(KVCase("mla_512_64_bf16", "heads",
                    _lay(1, 512, 64, 64, packing="packed"),
                    Ts=(1, 42, 4096), inputs="strided", memcheck=True))
    C.append(KVCase("mla_512_64_e4m3", "heads",
                    _lay(1, 512, 64, 64, "f8E4M3FN", packing="packed"),
                    Ts=(300,)))
    # -- io dtypes other than bf16.
    C.append(_mimo("io_f16_e4m3", "io", dtype="f8E4M3FN", io="f16",
                   gather_io="f16", Ts=(300,), inputs="strided"))
    C.append(_mimo("io_f32_e5m2_ph", "io", dtype="f8E5M2", scale="per_head",
                   io="f32", gather_io="f32", Ts=(300,)))
    C.append(KVCase("io_f32_to_bf16", "io", _lay(8, 128, 128, 16), io="f32",
                    Ts=(300,), inputs="strided", memcheck=True))
    C.append(KVCase("io_bf16_to_f32_hnd", "io",
                    _lay(8, 64, 64, 32, "f32", "hnd"), io="bf16",
                    Ts=(300,)))
    C.append(KVCase("io_f16_e4m3fnuz_b16", "io",
                    _lay(8, 128, 128, 16, "f8E4M3FNUZ", scale="per_head"),
                    io="f16", gather_io="f32", Ts=(42,)))
    # -- Misaligned input views (one-element path).
    C.append(_mimo("mimo_misaligned", "strided", Ts=(7, 300),
                   inputs="strided_misaligned", memcheck=True))
    C.append(_mimo("mimo_misaligned_e4m3", "strided", dtype="f8E4M3FN",
                   Ts=(300,), inputs="strided_misaligned"))
    # -- Checked kernels.
    C.append(_mimo("checked_inrange", "checked", checked=True, Ts=(300,)))
    C.append(_mimo("checked_oob_e4m3", "checked", dtype="f8E4M3FN",
                   checked=True, oob=True, Ts=(42,), memcheck=True))
    C.append(_mimo("checked_oob_packed_i32", "checked", packing="packed",
                   checked=True, oob=True, slots="i32", Ts=(7, 300)))
    C.append(KVCase("checked_oob_hnd", "checked",
                    _lay(8, 128, 128, 16, order="hnd"), checked=True,
                    oob=True, Ts=(4096,)))
    # -- Explicit / dynamic cache strides.
    lay, kw = combined(_lay(8, 128, 128, 16))
    C.append(KVCase("interleaved_nhd", "strides", lay, Ts=(42, 4096),
                    memcheck=True, **kw))
    lay, kw = dynamic(combined(_lay(8, 128, 128, 16, "f8E4M3FN", "hnd",
                                    scale="per_head")))
    C.append(KVCase("interleaved_hnd_dyn_e4m3", "strides", lay,
                    Ts=(42, 4096), memcheck=True, **kw))
    lay, kw = padded(_lay(4, 192, 128, 16), 64)
    C.append(KVCase("padded_blocks", "strides", lay, Ts=(300,), **kw))
    lay, kw = dynamic(padded(_lay(4, 192, 128, 16), 256))
    C.append(KVCase("padded_blocks_dyn", "strides", lay, Ts=(300,),
                    inputs="strided", **kw))
    # -- Caches larger than 4 GiB (byte offsets past 2^31 and 2^32).
    C.append(_mimo("big_bf16", "big", num_blocks=270000, big=True,
                   Ts=(4096,)))
    C.append(_mimo("big_packed_e4m3_i32", "big", dtype="f8E4M3FN",
                   scale="per_head", packing="packed", num_blocks=220000,
                   big=True, slots="i32", Ts=(4096,)))
    return C


# -- The grid first written for the host target (test_host_grid.py) --------

MIMO_DTYPES = [("bf16", "none"), ("f8E4M3FN", "per_tensor"),
               ("f8E4M3FN", "per_head"), ("f8E4M3FNUZ", "per_tensor"),
               ("f8E4M3FNUZ", "per_head"), ("f8E5M2", "per_tensor"),
               ("f8E5M2", "per_head")]
ARRANGEMENTS = [("nhd", "separate"), ("hnd", "separate"), ("nhd", "packed"),
                ("hnd", "packed")]
MIMO_LAYOUTS = [Layout(4, 192, 128, bs, o, p, d, sc)
                for bs in (16, 64) for (o, p) in ARRANGEMENTS
                for (d, sc) in MIMO_DTYPES]
# (num_tokens, input view, slot type)
MIMO_RUNS = [(1, "dense", "i64"), (7, "fused", "i32"), (42, "padded", "i64"),
             (42, "misaligned", "i32"), (300, "fused", "i64")]

# Other geometries: symmetric 8x128, odd head sizes, MLA-like 576 packed
# row, other block sizes, e5m2fnuz.
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
OTHER_RUNS = [(1, "dense", "i64"), (42, "fused", "i32"),
              (300, "padded", "i64"), (42, "misaligned", "i64")]

# Input / output types other than bf16 (f16, f32), also into a bf16 cache
# (conversion) and an f32 cache (raw).
IO_LAYOUTS = [
    (Layout(4, 192, 128, 16, "nhd", "separate", "bf16", "none"), "f16"),
    (Layout(4, 192, 128, 16, "nhd", "separate", "bf16", "none"), "f32"),
    (Layout(4, 192, 128, 16, "hnd", "packed", "f8E4M3FN", "per_head"), "f16"),
    (Layout(4, 192, 128, 64, "nhd", "separate", "f8E4M3FN", "per_tensor"),
     "f32"),
    (Layout(4, 192, 128, 16, "nhd", "packed", "f8E5M2", "per_head"), "f32"),
    (Layout(4, 192, 128, 16, "hnd", "separate", "f8E4M3FNUZ", "per_head"),
     "f16"),
    (Layout(2, 46, 46, 16, "nhd", "separate", "f16", "none"), "f16"),
    (Layout(2, 46, 80, 16, "hnd", "separate", "f32", "none"), "f32"),
    (Layout(2, 80, 80, 16, "nhd", "packed", "f16", "none"), "bf16"),
    # e5m2 max 57344 * scale up to 2 overflows f16 on dequantize: +-inf.
    (Layout(4, 192, 128, 16, "nhd", "separate", "f8E5M2", "per_head"), "f16"),
]
IO_RUNS = [(42, "fused", "i64"), (7, "misaligned", "i32")]


def _L(*a):
    return Layout(*a)


STRIDE_LAYOUTS = {
    "combined-nhd-bf16": combined(_L(4, 192, 128, 16, "nhd", "separate",
                                     "bf16", "none")),
    "combined-hnd-e4m3fn": combined(_L(4, 192, 128, 16, "hnd", "separate",
                                       "f8E4M3FN", "per_head")),
    "combined-sym-8x128": combined(_L(8, 128, 128, 16, "nhd", "separate",
                                      "bf16", "none")),
    "padblock64-nhd-bf16": padded(_L(4, 192, 128, 16, "nhd", "separate",
                                     "bf16", "none"), 64),
    "padblock3-hnd-e5m2": padded(_L(4, 192, 128, 16, "hnd", "separate",
                                    "f8E5M2", "per_tensor"), 3),
    "padtoken8-hnd-bf16": padded(_L(4, 192, 128, 16, "hnd", "separate",
                                    "bf16", "none"), 32, 8),
    "padtoken8-nhd-e4m3fnuz": padded(_L(4, 192, 128, 64, "nhd", "separate",
                                        "f8E4M3FNUZ", "per_head"), 0, 8),
    "packed-padblock-konly": padded(_L(4, 192, 128, 16, "nhd", "packed",
                                       "f8E4M3FN", "per_head"), 128,
                                    only_k=True),
    "packed-hnd-padtoken": padded(_L(4, 192, 128, 16, "hnd", "packed",
                                     "bf16", "none"), 0, 16, only_k=True),
    "dyn-dense-nhd-bf16": dynamic((_L(4, 192, 128, 16, "nhd", "separate",
                                      "bf16", "none"), {})),
    "dyn-padded-hnd-e4m3fn": dynamic(padded(_L(4, 192, 128, 16, "hnd",
                                               "separate", "f8E4M3FN",
                                               "per_head"), 64, 8)),
    "dyn-odd-nhd-bf16": dynamic(padded(_L(4, 192, 128, 16, "nhd", "separate",
                                          "bf16", "none"), 3, 1)),
    "dyn-partial-nhd-e5m2": dynamic(padded(_L(4, 192, 128, 64, "nhd",
                                              "separate", "f8E5M2",
                                              "per_head"), 16, 0),
                                    partial=True),
    "dyn-packed-nhd-bf16": dynamic(padded(_L(4, 192, 128, 16, "nhd",
                                             "packed", "bf16", "none"), 32,
                                          only_k=True)),
    "dyn-packed-hnd-e4m3fn-odd": dynamic(padded(_L(4, 192, 128, 16, "hnd",
                                                   "packed", "f8E4M3FN",
                                                   "per_tensor"), 5, 1,
                                                only_k=True)),
    "dyn-576-packed": dynamic(padded(_L(1, 512, 64, 16, "nhd", "packed",
                                        "bf16", "none"), 8, only_k=True)),
}
STRIDE_RUNS = [(7, "dense", "i64"), (300, "fused", "i32"),
               (42, "misaligned", "i64")]

PACKED_LAYOUTS = [
    Layout(4, 192, 128, 16, "nhd", "packed", "bf16", "none"),
    Layout(4, 192, 128, 64, "hnd", "packed", "f8E4M3FN", "per_head"),
    Layout(1, 512, 64, 64, "nhd", "packed", "bf16", "none"),
]

CHECKED_LAYOUTS = [
    Layout(4, 192, 128, 16, "nhd", "separate", "bf16", "none"),
    Layout(4, 192, 128, 16, "hnd", "packed", "f8E4M3FN", "per_head"),
    Layout(4, 192, 128, 64, "nhd", "separate", "f8E5M2", "per_tensor"),
    Layout(2, 46, 46, 16, "hnd", "separate", "f8E4M3FNUZ", "per_head"),
]

BIGID_LAYOUTS = [Layout(1, 8, 8, 2, "nhd", "separate", "bf16", "none"),
                 Layout(2, 16, 8, 1, "hnd", "packed", "f8E4M3FN", "per_head")]


def _run(name, group, layout, run, **kw):
    T, mode, slots = run
    # Packed layouts pass a decoy value_cache the kernels must not touch.
    if layout.packed:
        kw.setdefault("value_cache", "decoy")
    return KVCase(f"{name}-{mode}-{slots}", group, layout, slots=slots,
                  Ts=(T,), inputs=mode, **kw)


def host_grid_cases():
    """Every MiMo layout x arrangement x cache dtype, odd geometries, io
    dtypes, explicit / dynamic strides, packed value_cache handling,
    checked kernels, block ids > 65535 and a block stride of 2^28
    elements (offsets past 4 GiB)."""
    C = []
    for lay in MIMO_LAYOUTS:
        for r in MIMO_RUNS:
            C.append(_run(f"mimo-{lay.short()}", "host-mimo", lay, r))
    for lay in OTHER_LAYOUTS:
        for r in OTHER_RUNS:
            C.append(_run(f"other-{lay.short()}", "host-other", lay, r))
    for lay, io in IO_LAYOUTS:
        for r in IO_RUNS:
            C.append(_run(f"io-{lay.short()}-io_{io}", "host-io", lay, r,
                          io=io))
    for sname, (lay, kw) in STRIDE_LAYOUTS.items():
        for r in STRIDE_RUNS:
            C.append(_run(f"strides-{sname}", "host-strides", lay, r, **kw))
    for lay in PACKED_LAYOUTS:
        for vc in ("decoy", "same"):
            C.append(_run(f"packed-{lay.short()}-{vc}", "host-packed", lay,
                          (42, "dense", "i64"), value_cache=vc))
    for lay in CHECKED_LAYOUTS:
        for sl in ("i64", "i32"):
            C.append(_run(f"checked-{lay.short()}", "host-checked", lay,
                          (42, "padded", sl), checked=True, oob=True))
    for lay in BIGID_LAYOUTS:
        for sl in ("i64", "i32"):
            C.append(_run(f"bigid-{lay.short()}", "host-bigid", lay,
                          (42, "fused", sl), num_blocks=70000,
                          min_block=65530))
    # Block stride 2^28 bf16 elements: blocks >= 8 lie past 2^32 bytes and
    # 2^31 elements; 64-bit offsets everywhere are required.
    H, D, bstride = 2, 64, 1 << 28
    lay = Layout(H, D, D, 16, "nhd", "separate", "bf16", "none",
                 (bstride, H * D, D), (bstride, H * D, D))
    for sl in ("i64", "i32"):
        C.append(_run("offsets-beyond-4GiB", "host-4g", lay,
                      (40, "fused", sl), num_blocks=12, big=True,
                      outputs="dense"))
    return C


#---------------------------------------------------------------------------
# Chunked layouts: engines' cache tensors that split a dimension
#---------------------------------------------------------------------------

# A side's cache tensor, its dimensions outermost first: b block, h head,
# t token, e element; "t/x" / "t%x" ("e/x" / "e%x") the chunk of x tokens
# (elements) and the position inside it. One dense C-order tensor per side
# (the block dimension optionally padded), as the engines allocate them.
FORMS = {
    "nhd": ("b", "t", "h", "e"),
    "hnd": ("b", "h", "t", "e"),
    "legacy_k": ("b", "h", "e/x", "t", "e%x"),    # vLLM [nb, H, D/x, bs, x]
    "legacy_v": ("b", "h", "e", "t"),             # vLLM [nb, H, D, bs]
    "shuffled_v": ("b", "h", "t/x", "e", "t%x"),  # aiter [nb, H, bs/x, D, x]
}
ENGINES = {"vllm": ("legacy_k", "legacy_v"),
           "aiter": ("legacy_k", "shuffled_v")}


@dataclass(frozen=True)
class ChunkedLayout(Layout):
    """A separate layout whose sides are the cache tensors of FORMS
    (k_form, v_form) with chunks of x elements (tokens), x = 16 bytes of
    the cache dtype as vLLM and aiter choose it, and block_pad extra
    elements after each block. Build it with chunked(): its k_strides /
    v_strides and chunk fields are the tensors' (what kvgen is told);
    the harness's reference addresses the tensors by their shape
    (inner_dims) instead, so the two are independent."""
    k_form: str = "nhd"
    v_form: str = "nhd"
    x: int = 0
    block_pad: int = 0

    def form(self, side):
        return self.k_form if side == "k" else self.v_form

    def inner_dims(self, side):
        """((index name, size), ...) of one block of the side's tensor,
        outermost first."""
        D, bs, x = self.head_size(side), self.block_size, self.x
        size = {"h": self.heads, "t": bs, "e": D, "t/x": bs // x, "t%x": x,
                "e/x": D // x, "e%x": x}
        return tuple((d, size[d]) for d in FORMS[self.form(side)][1:])

    def tensor_strides(self, side):
        """{dimension name: element stride} of the side's tensor."""
        st, acc = {}, 1
        for d, n in reversed(self.inner_dims(side)):
            st[d] = acc
            acc *= n
        st["b"] = acc + self.block_pad
        return st

    def chunk_fields(self, side):
        """The side's `NAME_elem_stride` / `_token_chunks` / `_elem_chunks`
        values (None: the default) from its tensor's strides."""
        st = self.tensor_strides(side)
        elem = st.get("e%x", st.get("e"))
        return {"elem_stride": elem if elem != 1 else None,
                "token_chunks": (self.x, st["t/x"]) if "t/x" in st else None,
                "elem_chunks": (self.x, st["e/x"]) if "e/x" in st else None}

    def mlir(self) -> str:
        parts = []
        for s in "kv":
            for k, v in self.chunk_fields(s).items():
                if v is not None:
                    v = v if isinstance(v, int) else f"[{v[0]}, {v[1]}]"
                    parts.append(f"{s}_{k} = {v}")
        return Layout.mlir(self)[:-1] + "".join(", " + p for p in parts) + \
            ">"

    def short(self) -> str:
        s = (f"h{self.heads}-k{self.hk}-v{self.hv}-bs{self.block_size}-"
             f"{self.dtype}-{self.scale}-K_{self.k_form}-V_{self.v_form}"
             f"-x{self.x}")
        if self.block_pad:
            s += f"-pad{self.block_pad}"
        if self.has_dynamic():
            s += "-dyn" + "".join("d" if v is None else "s" for v in
                                  self.declared_strides("k"))
        return s


def chunked(H, Dk, Dv, bs, dtype="bf16", engine="vllm", scale=None,
            x=None, block_pad=0, forms=None):
    """The ChunkedLayout of an engine's (ENGINES) or the given (k, v)
    forms; x defaults to 16 bytes of the dtype."""
    kf, vf = forms or ENGINES[engine]
    lay = ChunkedLayout(H, Dk, Dv, bs, "nhd", "separate", dtype,
                        _scale(dtype, scale), k_form=kf, v_form=vf,
                        x=x or 16 // DTYPES[dtype].size,
                        block_pad=block_pad)

    def strides(side):
        st = lay.tensor_strides(side)
        return (st["b"], st.get("t%x", st.get("t")), st["h"])
    return lay.replace(k_strides=strides("k"), v_strides=strides("v"))


CHUNK_GEOMETRIES = {"mimo": (4, 192, 128), "sym": (8, 128, 128)}
CHUNK_DTYPES = [("bf16", "none"), ("f16", "none"), ("f8E4M3FN", "per_tensor"),
                ("f8E4M3FN", "per_head")]
# (T, input view, slot type), taken in turn by the layouts.
CHUNK_RUNS = [(42, "fused", "i64"), (300, "padded", "i32"),
              (7, "misaligned", "i64"), (42, "dense", "i32")]


def _chunk_case(name, lay, run, group="chunked", **kw):
    T, mode, slots = run
    kw.setdefault("io", "f16" if lay.dtype == "f16" else "bf16")
    kw.setdefault("Ts", (T,))
    return KVCase(f"chunked-{name}-{lay.short()}-{mode}-{slots}", group, lay,
                  slots=slots, inputs=mode, **kw)


def chunked_cases():
    """vLLM's legacy K [nb, H, D/x, bs, x] + V [nb, H, D, bs] and ROCm
    aiter's (legacy K, shuffled V [nb, H, bs/x, D, x]): MiMo (4 heads, K 192
    / V 128) and 8x128 geometries, bf16 / f16 / fp8 (per tensor and per
    head), block sizes 8 / 16 / 32, i32 / i64 slots, checked kernels with
    out-of-range slots, a padded and dynamic block stride, a K / V mix of
    chunked and plain tensors, a cache past 4 GiB. Groups chunked (every
    backend) and chunked-device (the cuda backend only: T sweep, more block
    sizes and dtypes)."""
    C = []
    i = 0
    for g, (H, Dk, Dv) in CHUNK_GEOMETRIES.items():
        for eng in ENGINES:
            for dt, sc in CHUNK_DTYPES:
                lay = chunked(H, Dk, Dv, 16, dt, eng, sc)
                C.append(_chunk_case(f"{eng}-{g}", lay,
                                     CHUNK_RUNS[i % len(CHUNK_RUNS)],
                                     memcheck=i < 4))
                i += 1
    for eng, g, bs, dt, sc, run in [
            ("vllm", "mimo", 32, "f8E4M3FN", "per_head", CHUNK_RUNS[0]),
            ("aiter", "sym", 32, "bf16", "none", CHUNK_RUNS[1]),
            # One chunk of x = 8 tokens per block (aiter), x = bs (vLLM).
            ("vllm", "mimo", 8, "bf16", "none", CHUNK_RUNS[2]),
            ("aiter", "sym", 8, "f16", "none", CHUNK_RUNS[3]),
            ("aiter", "mimo", 16, "f8E5M2", "per_tensor", CHUNK_RUNS[0]),
            # ROCm's fp8 (MI300).
            ("aiter", "sym", 16, "f8E4M3FNUZ", "per_head", CHUNK_RUNS[1])]:
        C.append(_chunk_case(f"{eng}-{g}", chunked(
            *CHUNK_GEOMETRIES[g], bs, dt, eng, sc), run))
    # f16 rows into a bf16 cache and bf16 into f16 (conversions).
    C.append(_chunk_case("io-vllm-mimo", chunked(4, 192, 128, 16, "bf16"),
                         CHUNK_RUNS[0], io="f16"))
    # Chunked and plain sides mixed.
    for forms in (("legacy_k", "nhd"), ("hnd", "shuffled_v")):
        C.append(_chunk_case("mixed", chunked(4, 192, 128, 16, "f8E4M3FN",
                                              forms=forms), CHUNK_RUNS[3]))
    # Checked kernels, out-of-range slots.
    for eng, g, dt, sc, sl in [("vllm", "mimo", "bf16", "none", "i32"),
                               ("aiter", "sym", "f8E4M3FN", "per_head",
                                "i64")]:
        C.append(_chunk_case(f"checked-{eng}-{g}", chunked(
            *CHUNK_GEOMETRIES[g], 16, dt, eng, sc), (42, "padded", sl),
            checked=True, oob=True, memcheck=True))
    # A padded block stride (the blocks are not dense: no whole-block
    # paths); dynamic strides (all, or the block stride only).
    C.append(_chunk_case("padded-vllm-mimo", chunked(
        4, 192, 128, 16, "bf16", block_pad=64), CHUNK_RUNS[1]))
    lay, kw = dynamic((chunked(4, 192, 128, 16, "f8E4M3FN", "aiter",
                               "per_head", block_pad=16), {}))
    C.append(_chunk_case("dyn-aiter-mimo", lay, CHUNK_RUNS[0], **kw))
    lay, kw = dynamic((chunked(8, 128, 128, 16, "bf16", "vllm",
                               block_pad=8), {}), partial=True)
    C.append(_chunk_case("dyn-block-vllm-sym", lay, CHUNK_RUNS[3], **kw))
    # -- The cuda backend only (the bundle): T sweep, block sizes 32 / 64
    #    for every dtype, e5m2 per head, fnuz, fp8 past 4 GiB.
    dev = dict(group="chunked-device", backends=("cuda",))
    for eng, g, dt, sc, Ts in [
            ("vllm", "mimo", "bf16", "none", (1, 7, 300, 4096, 16384)),
            ("aiter", "mimo", "f8E4M3FN", "per_head", (1, 42, 4096, 16384)),
            ("aiter", "sym", "bf16", "none", (7, 300, 4096)),
            ("vllm", "sym", "f8E4M3FN", "per_tensor", (1, 300, 4096))]:
        C.append(_chunk_case(f"T-{eng}-{g}", chunked(
            *CHUNK_GEOMETRIES[g], 16, dt, eng, sc), (0, "strided", "i64"),
            Ts=Ts, **dev))
    i = 0
    for bs in (32, 64):
        for eng in ENGINES:
            for dt, sc in CHUNK_DTYPES + [("f8E5M2", "per_head")]:
                g = ("mimo", "sym")[i % 2]
                C.append(_chunk_case(f"bs-{eng}-{g}", chunked(
                    *CHUNK_GEOMETRIES[g], bs, dt, eng, sc),
                    CHUNK_RUNS[i % len(CHUNK_RUNS)], **dev))
                i += 1
    for dt, sc in (("f8E4M3FNUZ", "per_tensor"), ("f8E5M2FNUZ", "per_head")):
        C.append(_chunk_case("aiter-mimo", chunked(4, 192, 128, 16, dt,
                                                   "aiter", sc),
                             (300, "fused", "i32"), **dev))
    # Past 4 GiB on every backend (host: a sparse mapping, 9 s; the
    # kernels are those of vllm-mimo bf16 i64 above).
    C.append(_chunk_case("big-vllm-mimo", chunked(4, 192, 128, 16),
                         (4096, "dense", "i64"), num_blocks=270000, big=True))
    C.append(_chunk_case("big-aiter-mimo", chunked(
        4, 192, 128, 16, "f8E4M3FN", "aiter", "per_head"),
        (4096, "dense", "i32"), num_blocks=400000, big=True, **dev))
    return C


KV_CASES = device_grid_cases() + host_grid_cases() + chunked_cases()


#---------------------------------------------------------------------------
# copy_blocks
#---------------------------------------------------------------------------

@dataclass(frozen=True)
class CopyBlocksCase:
    """kv.copy_blocks: block_mapping [pairs, 2] int64 (src, dst) over one
    cache of num_blocks blocks; dsts distinct and never a src. Checked
    cases add out-of-range and negative blocks (skipped, flag set).

    real_strides / v_offset / backends as for KVCase (dynamic strides: the
    buffers' own). Each entry of Ts is a number of pairs; num_blocks
    defaults to 2 * pairs + 3."""
    name: str
    group: str
    layout: Layout
    Ts: Tuple[int, ...] = (1, 3, 11)
    checked: bool = False
    real_strides: Optional[Tuple[Tuple[str, Tuple[int, int, int]], ...]] = None
    v_offset: Optional[int] = None
    num_blocks: Optional[int] = None
    memcheck: bool = False
    backends: Optional[Tuple[str, ...]] = None

    def strides(self, side):
        if self.real_strides is not None:
            return dict(self.real_strides)[side]
        return self.layout.declared_strides(side)

    def memcheck_Ts(self):
        return tuple(t for t in self.Ts if t <= 300)[:2] if self.memcheck \
            else ()

    def params(self):
        return tuple((T, T in self.memcheck_Ts()) for T in self.Ts)

    def kernels(self):
        return {"copy": copy_blocks_spec(self.layout, self.checked)}


def copy_blocks_cases():
    H, D, BS = 2, 64, 16
    C = []
    # First written for the host (test_copy_blocks.py): NHD / HND, packed,
    # K and V views of one [num_blocks, 2, BS, H, D] tensor, dynamic
    # strides, f32 with block size 1, bf16 / f16 / fp8.
    lay, kw = combined(_lay(H, D, D, BS, "f16"))
    base = [
        ("nhd", _lay(4, 192, 128, BS), {}),
        ("hnd_fp8", _lay(H, 64, 32, BS, "f8E4M3FN", "hnd",
                         scale="per_head"), {}),
        ("packed", _lay(H, 64, 32, BS, packing="packed"), {}),
        ("paired_strides", lay, kw),
        ("dynamic", *dynamic((Layout(H, 64, 32, BS, "hnd", "separate",
                                     "bf16", "none"), {}))),
        ("f32_b1", _lay(1, 576, 512, 1, "f32"), {}),
    ]
    for name, lay, kw in base:
        C.append(CopyBlocksCase(name, "copy-blocks", lay, memcheck=name in (
            "nhd", "packed", "dynamic"), **kw))
    C.append(CopyBlocksCase("checked_nhd", "copy-blocks",
                            _lay(4, 192, 128, BS), Ts=(4,), checked=True,
                            memcheck=True))
    # Engine-sized: many pairs (one work item per block) in caches of
    # thousands of blocks; MiMo fp8 HND, DeepSeek MLA's packed row, block
    # ids past 65535.
    C.append(CopyBlocksCase("mimo_bf16_many", "copy-blocks-large",
                            _lay(4, 192, 128, 16), Ts=(256, 2048)))
    C.append(CopyBlocksCase("mimo_e4m3_hnd_many", "copy-blocks-large",
                            _lay(4, 192, 128, 64, "f8E4M3FN", "hnd"),
                            Ts=(1024,)))
    C.append(CopyBlocksCase("mla_packed_many", "copy-blocks-large",
                            _lay(1, 512, 64, 64, packing="packed"),
                            Ts=(512,)))
    C.append(CopyBlocksCase("block_ids_above_65535", "copy-blocks-large",
                            _lay(1, 8, 8, 2), Ts=(64,), num_blocks=70000))
    # Chunked layouts (chunked_cases): vLLM's legacy and aiter's tensors,
    # dense blocks, a padded block stride, dynamic strides, checked.
    G = "copy-blocks-chunked"
    for name, lay, kw in [
            ("chunked_vllm_mimo", chunked(4, 192, 128, 16), {}),
            ("chunked_aiter_sym_e4m3", chunked(8, 128, 128, 16, "f8E4M3FN",
                                               "aiter", "per_head"), {}),
            ("chunked_vllm_padded_f16", chunked(4, 192, 128, 32, "f16",
                                                block_pad=24), {}),
            ("chunked_aiter_dynamic", *dynamic((chunked(
                4, 192, 128, 16, "bf16", "aiter", block_pad=8), {})))]:
        C.append(CopyBlocksCase(name, G, lay, Ts=(3, 11), memcheck=True,
                                **kw))
    C.append(CopyBlocksCase("chunked_checked_aiter_mimo_e5m2", G,
                            chunked(4, 192, 128, 16, "f8E5M2", "aiter"),
                            Ts=(4,), checked=True))
    C.append(CopyBlocksCase("chunked_vllm_mimo_many", G,
                            chunked(4, 192, 128, 16, "f8E4M3FN"),
                            Ts=(1024,), backends=("cuda",)))
    return C


COPY_BLOCKS_CASES = copy_blocks_cases()


#---------------------------------------------------------------------------

# op -> its case list; a new op adds its list here.
CASE_LISTS = {"kv": KV_CASES, "copy_blocks": COPY_BLOCKS_CASES}


def case_by_name(cases, name):
    return next(c for c in cases if c.name == name)


def all_specs(names=None):
    """Unique KSpecs of every case of every op, in case order (names: a
    compiled regular expression, the cases whose name it finds only)."""
    seen = {}
    for cases in CASE_LISTS.values():
        for c in cases:
            if names is not None and not names.search(c.name):
                continue
            for k in c.kernels().values():
                seen[k] = None
    return list(seen)


def _check_unique():
    for op, cases in CASE_LISTS.items():
        names = [c.name for c in cases]
        dup = {n for n in names if names.count(n) > 1}
        assert not dup, f"{op}: duplicate case names {sorted(dup)}"


_check_unique()


if __name__ == "__main__":
    for op, cases in CASE_LISTS.items():
        items = sum(len(c.Ts) for c in cases)
        mc = sum(len(c.memcheck_Ts()) for c in cases)
        print(f"{op}: {len(cases)} cases, {items} items "
              f"({mc} in the memcheck subset)")
    print(f"{len(all_specs())} kernels")
