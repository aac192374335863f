"""A bundle manifest is checked against its emitted source in every field
that changes the code (issue 26, row 2): not only the launch geometry and
the layout, but the op, `unchecked`, the slot type, the io type and every
other option. An `--unchecked` kernel listed as `unchecked = 0` used to be
served for a checked spec (a slot of 2^40 then wrote outside the cache), an
i64-slot kernel listed as `i32` read int32 slot arrays as int64.

Real sources from build/bin/kvgen emit (target host), then the manifest
edited as a hostile user would: loading the kernel fails with
KVGEN_ERROR_BUNDLE naming the field, before anything is compiled. Each op's
unedited kernel, with non-default options, loads: the runtime's check and
the emitter agree for every op.

Run:  python3 -m pytest -q test/python/test_bundle_manifest.py
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import kvgen  # noqa: E402

BUILD = Path(os.environ.get("KVGEN_BUILD_DIR", REPO / "build"))
KVGEN = BUILD / "bin" / "kvgen"

# (preset, op, extra kvgen emit options): every op, with options away from
# their defaults where the op has them.
KERNELS = {
    "rc": ("llama3-8b", "reshape_and_cache",
           ["--io", "f16", "--slots", "i32", "--unchecked"]),
    "gather": ("mimo-v2-flash-fp8", "gather",
               ["--dequantize", "--io", "f32"]),
    "copy": ("llama3-8b", "copy_blocks", ["--unchecked"]),
    "swap": ("llama3-8b", "swap_blocks", []),
    "mla_write": ("deepseek-v3-mla", "concat_and_cache_mla",
                  ["--slots", "i32"]),
    "mla_read": ("deepseek-v3-mla-fp8", "gather_mla", ["--dequantize"]),
    "attn": ("llama3-8b", "paged_attention",
             ["--num_q_heads", "16", "--sinks", "--logits_soft_cap"]),
}


@pytest.fixture(scope="module")
def emitted(tmp_path_factory, kvgen_cli):
    """{key: (bundle dir, kernel name)}: one single-kernel bundle each."""
    d = tmp_path_factory.mktemp("manifests")
    out = {}
    for key, (preset, op, extra) in KERNELS.items():
        r = subprocess.run([str(KVGEN), "emit", "--preset", preset, "--op", op,
                            "--target", "host", "--bundle", str(d / key)]
                           + extra, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        out[key] = (d / key, re.search(r"kvgen emit: (\w+) ->",
                                       r.stdout).group(1))
    return out


def load(bundle, name, tmp_path):
    """Loads `name` from `bundle`; returns (KvgenError or None, compiles)."""
    ctx = kvgen.Context("host", cache_dir=str(tmp_path / "cache"))
    try:
        ctx.load_bundle(str(bundle))
        try:
            ctx.kernel_by_name(name)
            err = None
        except kvgen.KvgenError as e:
            err = e
        return err, ctx.stats()["compiles"]
    finally:
        ctx.close()


def edited(emitted, key, tmp_path, old, new):
    """A copy of bundle `key` whose manifest line `old` reads `new`."""
    src, name = emitted[key]
    dst = tmp_path / f"{key}-edited"
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    m = dst / "kvgen-manifest.txt"
    text = m.read_text()
    assert f"\n{old}\n" in text, text
    m.write_text(text.replace(f"\n{old}\n", f"\n{new}\n"))
    return dst, name


@pytest.mark.parametrize("key", sorted(KERNELS))
def test_unedited_kernel_of_every_op_loads(emitted, key, tmp_path):
    bundle, name = emitted[key]
    err, compiles = load(bundle, name, tmp_path)
    assert err is None, str(err)
    assert compiles == 1


@pytest.mark.parametrize("key, old, new, says", [
    # The two: an unchecked kernel served as checked, an i64-slot
    # kernel as i32.
    ("rc", "unchecked = 1", "unchecked = 0",
     "the manifest says unchecked = 0 but its source's kernel has 'static "
     "constexpr bool unchecked = true;'"),
    ("rc", "slots = i32", "slots = i64",
     "the manifest says slots = i64 but its source's kernel has 'typedef "
     "int32_t slots;'"),
    ("rc", "io = f16", "io = bf16",
     "the manifest says io = bf16 but its source's kernel has 'typedef "
     "kvgen::dt_f16 io;'"),
    ("gather", "io = f32", "io = bf16",
     "the manifest says io = bf16 but its source's kernel has 'typedef "
     "kvgen::dt_f32 io;'"),
    ("copy", "unchecked = 1", "unchecked = 0",
     "the manifest says unchecked = 0"),
    ("swap", "unchecked = 0", "unchecked = 1",
     "the manifest says unchecked = 1"),
    ("mla_write", "slots = i32", "slots = i64",
     "the manifest says slots = i64"),
    ("mla_read", "io = bf16", "io = f16",
     "the manifest says io = f16 but its source's kernel has 'typedef "
     "kvgen::dt_bf16 io;'"),
    ("attn", "num_q_heads = 16", "num_q_heads = 8",
     "the manifest says num_q_heads = 8 but its source's kernel has 'static "
     "constexpr int num_q_heads = 16;'"),
    ("attn", "sinks = 1", "sinks = 0",
     "the manifest says sinks = 0 but its source's kernel has 'static "
     "constexpr bool sinks = true;'"),
    ("attn", "logits_soft_cap = 1", "logits_soft_cap = 0",
     "the manifest says logits_soft_cap = 0"),
    # Another op with the same options: another argument struct.
    ("copy", "op = copy_blocks", "op = swap_blocks",
     "the manifest says op = swap_blocks but its source's kernel"),
])
def test_edited_manifest_is_refused_before_compiling(emitted, tmp_path, key,
                                                     old, new, says):
    bundle, name = edited(emitted, key, tmp_path, old, new)
    err, compiles = load(bundle, name, tmp_path)
    assert err is not None, f"{old} -> {new} was accepted"
    assert err.status_name == "KVGEN_ERROR_BUNDLE", str(err)
    assert says in err.message, err.message
    assert "nothing was compiled" in err.message, err.message
    assert compiles == 0


def test_read_manifest_reads_only_a_bounded_regular_file(tmp_path):
    """kvgen.read_manifest as the runtime's reader (issue 26, rows 8 and
    9's class): a FIFO is refused at once instead of blocking in open(),
    /dev/zero and a sparse file past 16 MiB are refused without reading
    them; a real manifest still reads."""
    import os
    import signal
    from kvgen import read_manifest
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(3 << 30)
    signal.alarm(20)  # a blocking open() fails the test instead of hanging
    try:
        for bad, words in ((fifo, "not a regular file"),
                           ("/dev/zero", "not a regular file"),
                           (big, "more than the")):
            with pytest.raises(ValueError, match=words):
                read_manifest(bad)
    finally:
        signal.alarm(0)
    ok = tmp_path / "m.txt"
    ok.write_text("kvgen-bundle 2\n[kernel]\nname = a\nop = gather\n")
    assert read_manifest(ok) == [{"name": "a", "op": "gather"}]
