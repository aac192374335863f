"""The device correctness grid and the benchmark set, shared by
scripts/emit_device_bundle.py (emits every kernel they need, on a machine
with the MLIR build) and scripts/device_grid.py / bench/bench.py (run them on
the GPU). Both sides derive kernel specs from the cases here, so they agree
on what the bundle holds.

A Case is one cache geometry + kernel flavour, run for each T in Ts. Each case
needs up to three kernels (Case.kernels()):
  write      reshape_and_cache, io dtype `io`
  gather     raw gather (io = the cache dtype)
  gather_dq  fp8 caches: dequantizing gather to `gather_io` (default bf16)
  gather_cv  non-fp8 caches whose `io` differs from the cache dtype: a
             converting gather to `io` (dequantize = 1 without a scale)
"""

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from kvgen import FP8_DTYPES, Layout  # noqa: E402  (pure Python part)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BUNDLE = REPO / ".dev" / "bundle"

T_ALL = (1, 7, 42, 300, 4096, 65536)


@dataclass(frozen=True)
class KSpec:
    """One kernel: the arguments of Context.kernel(...)."""
    op: str
    layout: str  # canonical layout text
    io: str
    slots: str = "i64"
    checked: bool = False
    dequantize: bool = False

    def emit_args(self):
        """`kvgen emit` flags (without --layout/--target/--bundle)."""
        a = ["--op", self.op, "--io", self.io, "--slots", self.slots]
        if self.checked:
            a.append("--checked")
        if self.dequantize:
            a.append("--dequantize")
        return a

    def kernel_name(self):
        """The name `kvgen emit` gives it (codegen defaultKernelName);
        informational only: lookups go by spec."""
        lay = Layout.parse(self.layout)
        short = {"bf16": "bf16", "f16": "f16", "f32": "f32",
                 "f8E4M3FN": "e4m3fn", "f8E4M3FNUZ": "e4m3fnuz",
                 "f8E5M2": "e5m2", "f8E5M2FNUZ": "e5m2fnuz"}
        n = (f"kvgen_{self.op}_h{lay.num_kv_heads}_k{lay.head_size_k}"
             f"_v{lay.head_size_v}_b{lay.block_size}_{lay.order}_"
             f"{'packed' if lay.packed else 'sep'}_{short[lay.dtype]}")
        if lay.scale != "none":
            n += "_sh" if lay.scale == "per_head" else "_st"

        def tag(s):
            return "x".join("d" if x is None else str(x) for x in s)
        if lay.k_strides is not None:
            n += "_ks" + tag(lay.k_strides)
        if lay.v_strides is not None:
            n += "_vs" + tag(lay.v_strides)
        n += ("_in_" if self.op == "reshape_and_cache" else "_out_") + \
            short[self.io] + "_" + self.slots
        if self.dequantize:
            n += "_dq"
        if self.checked:
            n += "_checked"
        return n


@dataclass(frozen=True)
class Case:
    name: str
    group: str
    H: int
    Dk: int
    Dv: int
    bs: int
    dtype: str = "bf16"
    order: str = "nhd"
    packing: str = "separate"
    scale: Optional[str] = None  # default: per_tensor for fp8, else none
    io: str = "bf16"
    gather_io: str = "bf16"  # dequantizing gather output (fp8 caches)
    slots: str = "i64"
    checked: bool = False
    Ts: Tuple[int, ...] = (42,)
    strided: bool = False   # inputs/outputs are slices of fused tensors
    misalign: bool = False  # fused offset breaks 16-byte row alignment
    oob: bool = False       # checked kernels: add out-of-range slots
    big: bool = False       # > 4 GiB cache, slots at the byte edges
    num_blocks: Optional[int] = None
    # K and V blocks interleaved in one buffer ([NB, 2, ...], vLLM style):
    interleaved: bool = False
    dynamic: bool = False   # layout strides '?' (passed at launch)
    block_pad: int = 0      # extra elements per block (static strides)
    memcheck: bool = False  # part of the compute-sanitizer subset
    # inputs: every non-NaN 16-bit pattern (inf, subnormals included) in
    # order instead of random normals (16-bit io only)
    allbits: bool = False

    @property
    def scale_kind(self):
        if self.scale is not None:
            return self.scale
        return "per_tensor" if self.dtype in FP8_DTYPES else "none"

    def real_strides(self):
        """(k, v) element strides (block, token, head) of the buffers the
        grid allocates, or None for the dense layout. Written out here, not
        taken from kvgen."""
        if not (self.interleaved or self.block_pad):
            return None
        H, bs = self.H, self.bs
        out = []
        for D in (self.Dk, self.Dv):
            if self.interleaved:
                # [NB, 2, bs, H, D] (nhd) / [NB, 2, H, bs, D] (hnd)
                assert self.Dk == self.Dv and self.packing == "separate"
                blk = 2 * bs * H * D
            else:
                blk = bs * H * D + self.block_pad
            if self.order == "nhd":
                out.append((blk, H * D, D))
            else:
                out.append((blk, D, bs * D))
        return tuple(out)

    def layout(self) -> Layout:
        ks = vs = None
        rs = self.real_strides()
        if rs is not None:
            ks, vs = rs
            if self.dynamic:
                ks = vs = (None, None, None)
        return Layout(self.H, self.Dk, self.Dv, self.bs, dtype=self.dtype,
                      order=self.order, packing=self.packing,
                      scale=self.scale_kind, k_strides=ks, v_strides=vs)

    def kernels(self):
        """{role: KSpec} for this case."""
        lt = self.layout().text
        out = {"write": KSpec("reshape_and_cache", lt, self.io, self.slots,
                              self.checked),
               "gather": KSpec("gather", lt, self.dtype, self.slots,
                               self.checked)}
        if self.dtype in FP8_DTYPES:
            out["gather_dq"] = KSpec("gather", lt, self.gather_io, self.slots,
                                     self.checked, True)
        elif self.io != self.dtype:
            # gather to another dtype: the dialect spells it dequantize
            # (no scale on non-fp8 caches: a plain conversion).
            out["gather_cv"] = KSpec("gather", lt, self.io, self.slots,
                                     self.checked, True)
        return out


def _mimo(name, group, **kw):
    return Case(name, group, 4, 192, 128, kw.pop("bs", 16), **kw)


def grid_cases():
    C = []
    # -- MiMo-V2-Flash full attention: every block size (bf16 nhd).
    for bs in (8, 16, 32, 64, 128, 256):
        C.append(_mimo(f"mimo_b{bs}", "mimo-block", bs=bs, Ts=(42, 300),
                       strided=bs in (16, 128), slots="i32"
                       if bs in (32, 256) else "i64",
                       memcheck=bs == 8))
    # -- MiMo: T sweep.
    C.append(_mimo("mimo_T_bf16", "mimo-T", Ts=T_ALL, strided=True,
                   memcheck=True))
    C.append(_mimo("mimo_T_e4m3_ph_b64", "mimo-T", bs=64, dtype="f8E4M3FN",
                   scale="per_head", Ts=T_ALL))
    C.append(_mimo("mimo_T_packed", "mimo-T", packing="packed",
                   Ts=(1, 300, 65536), strided=True))
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
                           Ts=(300,), strided=i % 2 == 0,
                           slots="i32" if i % 3 == 0 else "i64",
                           memcheck=(dt == "f8E5M2" and sc == "per_head")))
            i += 1
    # -- Every non-NaN bf16 / f16 bit pattern (inf, subnormals, huge values;
    # NaN: scripts/device_grid.py allbits_np) into each fp8 encoding: the
    # fast and the exact quantizing paths on sm_89+.
    for dt in FP8_DTYPES:
        C.append(_mimo(f"mimo_allbits_{dt}", "allbits", dtype=dt,
                       scale="per_head" if "E5" in dt else "per_tensor",
                       allbits=True, Ts=(52, 205, 16384)))
    C.append(_mimo("mimo_allbits_f16_e4m3fn", "allbits", dtype="f8E4M3FN",
                   io="f16", allbits=True, Ts=(52,)))
    C.append(_mimo("mimo_f16", "mimo-dtype", dtype="f16", io="f16",
                   Ts=(300,), strided=True))
    C.append(_mimo("mimo_f32_hnd", "mimo-dtype", dtype="f32", io="f32",
                   order="hnd", Ts=(300,)))
    # MiMo sliding-window layers: 8 heads.
    C.append(Case("mimo_swa_b64", "mimo-dtype", 8, 192, 128, 64,
                  dtype="f8E4M3FN", scale="per_head", Ts=(300,),
                  strided=True))
    # -- Head sizes (symmetric K = V), rotating order / packing / dtype.
    fp8_cycle = ("f8E4M3FN", "f8E4M3FNUZ", "f8E5M2", "f8E4M3FN",
                 "f8E5M2FNUZ", "f8E4M3FN", "f8E5M2")
    for j, D in enumerate((64, 80, 96, 112, 128, 192, 256)):
        H = 8 if D in (64, 128) else 4
        order = ("nhd", "hnd")[j % 2]
        C.append(Case(f"d{D}_bf16_{order}", "heads", H, D, D,
                      (16, 32, 64)[j % 3], order=order, Ts=(42,),
                      strided=j % 2 == 0, misalign=j == 2,
                      memcheck=D == 80))
        C.append(Case(f"d{D}_{fp8_cycle[j]}_packed", "heads", H, D, D,
                      (64, 16, 32)[j % 3], dtype=fp8_cycle[j],
                      scale=("per_head", "per_tensor")[j % 2],
                      packing="packed", order=("hnd", "nhd")[j % 2],
                      Ts=(300,), strided=j % 2 == 1,
                      slots="i32" if j % 2 else "i64",
                      memcheck=D == 112))
    # 576: one symmetric head, and DeepSeek MLA's packed 512 + 64 row.
    C.append(Case("d576_bf16", "heads", 1, 576, 576, 16, Ts=(42, 300),
                  strided=True))
    C.append(Case("d576_e4m3", "heads", 1, 576, 576, 64, dtype="f8E4M3FN",
                  Ts=(300,)))
    C.append(Case("mla_512_64_bf16", "heads", 1, 512, 64, 64,
                  packing="packed", Ts=(1, 42, 4096), strided=True,
                  memcheck=True))
    C.append(Case("mla_512_64_e4m3", "heads", 1, 512, 64, 64,
                  dtype="f8E4M3FN", packing="packed", Ts=(300,)))
    # -- io dtypes other than bf16.
    C.append(_mimo("io_f16_e4m3", "io", dtype="f8E4M3FN", io="f16",
                   gather_io="f16", Ts=(300,), strided=True))
    C.append(_mimo("io_f32_e5m2_ph", "io", dtype="f8E5M2", scale="per_head",
                   io="f32", gather_io="f32", Ts=(300,)))
    C.append(Case("io_f32_to_bf16", "io", 8, 128, 128, 16, io="f32",
                  Ts=(300,), strided=True, memcheck=True))
    C.append(Case("io_bf16_to_f32_hnd", "io", 8, 64, 64, 32, dtype="f32",
                  order="hnd", io="bf16", Ts=(300,)))
    C.append(Case("io_f16_e4m3fnuz_b16", "io", 8, 128, 128, 16,
                  dtype="f8E4M3FNUZ", scale="per_head", io="f16",
                  gather_io="f32", Ts=(42,)))
    # -- Misaligned input views (one-element path).
    C.append(_mimo("mimo_misaligned", "strided", Ts=(7, 300), strided=True,
                   misalign=True, memcheck=True))
    C.append(_mimo("mimo_misaligned_e4m3", "strided", dtype="f8E4M3FN",
                   Ts=(300,), strided=True, misalign=True))
    # -- Checked kernels.
    C.append(_mimo("checked_inrange", "checked", checked=True, Ts=(300,)))
    C.append(_mimo("checked_oob_e4m3", "checked", dtype="f8E4M3FN",
                   checked=True, oob=True, Ts=(42,), memcheck=True))
    C.append(_mimo("checked_oob_packed_i32", "checked", packing="packed",
                   checked=True, oob=True, slots="i32", Ts=(7, 300)))
    C.append(Case("checked_oob_hnd", "checked", 8, 128, 128, 16,
                  order="hnd", checked=True, oob=True, Ts=(4096,)))
    # -- Explicit / dynamic cache strides.
    C.append(Case("interleaved_nhd", "strides", 8, 128, 128, 16,
                  interleaved=True, Ts=(42, 4096), memcheck=True))
    C.append(Case("interleaved_hnd_dyn_e4m3", "strides", 8, 128, 128, 16,
                  order="hnd", dtype="f8E4M3FN", scale="per_head",
                  interleaved=True, dynamic=True, Ts=(42, 4096),
                  memcheck=True))
    C.append(_mimo("padded_blocks", "strides", block_pad=64, Ts=(300,)))
    C.append(_mimo("padded_blocks_dyn", "strides", block_pad=256,
                   dynamic=True, Ts=(300,), strided=True))
    # -- Caches larger than 4 GiB (byte offsets past 2^31 and 2^32).
    C.append(_mimo("big_bf16", "big", num_blocks=270000, big=True,
                   Ts=(4096,)))
    C.append(_mimo("big_packed_e4m3_i32", "big", dtype="f8E4M3FN",
                   scale="per_head", packing="packed", num_blocks=220000,
                   big=True, slots="i32", Ts=(4096,)))
    return C


# -- Benchmarks ---------------------------------------------------------------

BENCH_T = (1, 8, 64, 512, 4096, 32768, 131072)


def bench_geometries():
    """(label, Layout) for every bench geometry x cache dtype."""
    out = []
    for dt in ("bf16", "f8E4M3FN"):
        for label, (H, Dk, Dv, bs, order, packing) in (
                ("mimo_b16", (4, 192, 128, 16, "nhd", "separate")),
                ("mimo_b64", (4, 192, 128, 64, "nhd", "separate")),
                ("h8x128_b16", (8, 128, 128, 16, "nhd", "separate")),
                ("mimo_packed_b16", (4, 192, 128, 16, "nhd", "packed")),
                ("mimo_hnd_b16", (4, 192, 128, 16, "hnd", "separate"))):
            out.append((f"{label}_{dt}",
                        Layout(H, Dk, Dv, bs, dtype=dt, order=order,
                               packing=packing)))
    return out


def bench_kernels():
    out = []
    for _, lay in bench_geometries():
        out.append(KSpec("reshape_and_cache", lay.text, "bf16"))
        out.append(KSpec("gather", lay.text, "bf16",
                         dequantize=lay.dtype != "bf16"))
    return out


def all_kernels(which="all"):
    """Unique KSpecs of the grid ('grid'), the bench ('bench') or both."""
    seen = {}
    if which in ("grid", "all"):
        for c in grid_cases():
            for k in c.kernels().values():
                seen[k] = None
    if which in ("bench", "all"):
        for k in bench_kernels():
            seen[k] = None
    return list(seen)


if __name__ == "__main__":
    cases = grid_cases()
    ks = all_kernels("grid")
    launches = sum(len(c.Ts) * len(c.kernels()) for c in cases)
    print(f"{len(cases)} cases, {len(ks)} grid kernels, "
          f"{len(all_kernels('all'))} with the bench, ~{launches} launches")
    for c in cases:
        print(f"  {c.group:11s} {c.name:36s} T={c.Ts} "
              f"{'memcheck' if c.memcheck else ''}")
