"""The benchmark set of bench/bench.py: geometries, token counts, and the
kernels they need (emitted with the grid's by
`test/python/grid/emit_bundle.py --set bench|all`).

MiMo-V2-Flash 4 KV heads x (K 192 / V 128) at block 16 and 64, 8 x 128 /
128 at block 16, MiMo packed (320-wide K|V rows) and HND at block 16; each
with cache dtype bf16 and f8E4M3FN (per-tensor scale). bf16 inputs, i64
slots.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BUNDLE = REPO / ".dev" / "bundle"

BENCH_T = (1, 8, 64, 512, 1024, 2048, 4096, 8192, 16384, 32768, 131072)

# label: (num_kv_heads, head_size_k, head_size_v, block_size, order, packing)
GEOMETRIES = (
    ("mimo_b16", (4, 192, 128, 16, "nhd", "separate")),
    ("mimo_b64", (4, 192, 128, 64, "nhd", "separate")),
    ("h8x128_b16", (8, 128, 128, 16, "nhd", "separate")),
    ("mimo_packed_b16", (4, 192, 128, 16, "nhd", "packed")),
    ("mimo_hnd_b16", (4, 192, 128, 16, "hnd", "separate")),
)
CACHE_DTYPES = ("bf16", "f8E4M3FN")


def bench_geometries():
    """(label, kvgen.Layout) for every bench geometry x cache dtype."""
    import kvgen
    out = []
    for dt in CACHE_DTYPES:
        for label, (H, Dk, Dv, bs, order, packing) in GEOMETRIES:
            out.append((f"{label}_{dt}",
                        kvgen.Layout(H, Dk, Dv, bs, dtype=dt, order=order,
                                     packing=packing)))
    return out


def bench_kernels():
    """(op, layout text, options) of every kernel bench.py launches: the
    write from bf16 and the gather back to bf16 (dequantizing for fp8),
    each as the default (range-checked) kernel and, for the check's cost,
    its unchecked twin."""
    out = []
    for _, lay in bench_geometries():
        for unchecked in (False, True):
            out.append(("reshape_and_cache", lay.text,
                        {"io": "bf16", "slots": "i64",
                         "unchecked": unchecked}))
            out.append(("gather", lay.text,
                        {"io": "bf16", "slots": "i64",
                         "dequantize": lay.dtype != "bf16",
                         "unchecked": unchecked}))
    return out
