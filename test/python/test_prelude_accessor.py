"""The paged-cache accessor is the only prelude code that picks a K or V field.

codegen/prelude/paged_kv.h's PagedKV (cache tensors, maps, scales, block
ids) and TokenRows (the rows ops' dense K and V rows) read the K/V fields of
the op argument structs; core.h and the family headers (rows.h, blocks.h,
attention*.h) go through them (docs/codegen.md, "The paged-cache accessor"). This test
reads the family headers as text and fails on any read of such a field;
assignments to one (rows.h's MLA ops filling the K/V argument struct from
their own fields) are not reads.
"""

import re
from pathlib import Path

PRELUDE = Path(__file__).resolve().parents[2] / "codegen" / "prelude"

FAMILY_HEADERS = ("core.h", "rows.h", "rows_tiles.h", "blocks.h",
                  "attention_mma.h", "attention_shape.h", "attention_phases.h",
                  "attention_decode.h", "attention_tiles.h",
                  "attention_prefill.h", "attention.h")

# The K/V fields of kernel_abi.h's argument structs (Ops.def roles CACHE,
# SCALE, CACHE_STRIDES, NUM_BLOCKS of swap_blocks' sets, ROWS and their
# ROW_STRIDE fields).
KV_FIELDS = (
    "key_cache", "value_cache", "src_key_cache", "src_value_cache",
    "dst_key_cache", "dst_value_cache", "k_scale", "v_scale",
    "k_cache_strides", "v_cache_strides", "src_num_blocks", "dst_num_blocks",
    "key", "value", "key_out", "value_out", "key_stride_token",
    "key_stride_head", "value_stride_token", "value_stride_head",
    "key_out_stride_token", "key_out_stride_head", "value_out_stride_token",
    "value_out_stride_head")

FIELD_USE = re.compile(r"\b[A-Za-z_]\w*\s*\.\s*(" + "|".join(KV_FIELDS) +
                       r")\b(\s*=(?!=))?")


def kv_field_reads(text):
    """(line number, line) of every read of a K/V field outside comments;
    an assignment target (`a.key_cache = ...`, or the destination of
    copyStrides) is not a read."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        code = line.split("//")[0]
        for m in FIELD_USE.finditer(code):
            if m.group(2):
                continue  # assigned
            if re.search(r"copyStrides\(\s*\w+\." + m.group(1), code):
                continue  # written through
            out.append((n, line.strip()))
    return out


def test_family_headers_read_no_kv_field():
    found = {h: kv_field_reads((PRELUDE / h).read_text())
             for h in FAMILY_HEADERS}
    found = {h: r for h, r in found.items() if r}
    assert not found, (
        "K/V fields read outside the accessor (paged_kv.h PagedKV/TokenRows): "
        + "; ".join(f"{h}:{n}: {l}" for h, r in found.items() for n, l in r))


def test_the_check_sees_reads_and_not_assignments():
    reads = kv_field_reads(
        "p = x.isK ? a.key_cache : a.value_cache;\n"
        "a.key_cache = m.kv_cache; // a.value_cache in a comment\n"
        "copyStrides(a.k_cache_strides, m.cache_strides);\n"
        "s = loadScale(a.v_scale, 0, h); q = a.key_out_stride_token;\n")
    assert [n for n, _ in reads] == [1, 1, 4, 4]


def test_the_accessor_reads_them():
    accessor = (PRELUDE / "paged_kv.h").read_text()
    assert kv_field_reads(accessor), "paged_kv.h's accessor no longer reads them"
