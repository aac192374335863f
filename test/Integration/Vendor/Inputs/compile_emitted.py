"""The emitted kernels compile in-process with the vendors' compilers, with
no GPU: NVRTC to an sm_90 cubin and Debian's comgr to a gfx90a code object,
through the runtime's compile-only contexts. Any compiler warning fails a
compile (the runtime treats it as an error). Skips, with the reason, where
libnvrtc or libamd_comgr cannot be loaded."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import kvgen  # noqa: E402

BUILD = Path(os.environ.get("KVGEN_BUILD_DIR", REPO / "build"))
KVGEN = BUILD / "bin" / "kvgen"

MIMO = dict(num_kv_heads=4, head_size_k=192, head_size_v=128, block_size=16)
# (layout, op, io, extra flags): the MiMo geometry in each cache dtype and
# layout family, odd head sizes, a 576-wide packed row, dynamic strides.
SPECS = [
    (kvgen.Layout(**MIMO), "reshape_and_cache", "bf16", []),
    (kvgen.Layout(**MIMO), "gather", "bf16", []),
    (kvgen.Layout(**MIMO, dtype="f8E4M3FN", scale="per_head"),
     "reshape_and_cache", "bf16", []),
    (kvgen.Layout(**MIMO, dtype="f8E4M3FN", scale="per_head"),
     "gather", "bf16", ["--dequantize"]),
    (kvgen.Layout(**MIMO, dtype="f8E4M3FNUZ", scale="per_tensor",
                  order="hnd"), "reshape_and_cache", "f32", []),
    (kvgen.Layout(**MIMO, dtype="f8E5M2", scale="per_tensor",
                  packing="packed"), "reshape_and_cache", "bf16",
     ["--slots", "i32", "--checked"]),
    (kvgen.Layout(8, 46, 46, 16, dtype="f16"), "reshape_and_cache", "f16", []),
    (kvgen.Layout(8, 80, 80, 32), "gather", "bf16", []),
    (kvgen.Layout(1, 512, 64, 64, packing="packed"), "reshape_and_cache",
     "bf16", []),
    (kvgen.Layout(**MIMO, k_strides=(None, 768, 192),
                  v_strides=(None, None, 128)), "reshape_and_cache", "bf16",
     []),
]


def emit_bundle(directory, target):
    for i, (layout, op, io, extra) in enumerate(SPECS):
        f = directory / f"layout{i}.mlir"
        f.write_text(f"#kv.layout<{layout.text}>\n")
        cmd = [str(KVGEN), "emit", "--layout", str(f), "--op", op, "--io", io,
               "--target", target, "--bundle", str(directory / "bundle")]
        r = subprocess.run(cmd + extra, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    names = [line.split("=", 1)[1].strip()
             for line in (directory / "bundle" / "kvgen-manifest.txt")
             .read_text().splitlines() if line.startswith("name")]
    assert len(names) == len(SPECS)
    return directory / "bundle", names


@pytest.mark.parametrize("backend,target", [("cuda", "sm_90"),
                                            ("hip", "gfx90a")])
def test_emitted_kernels_compile(tmp_path, backend, target):
    if not KVGEN.is_file():
        pytest.skip(f"{KVGEN} not built")
    try:
        ctx = kvgen.Context.compile_only(backend, target,
                                         cache_dir=str(tmp_path / "cache"))
    except (OSError, kvgen.KvgenError) as e:
        pytest.skip(f"{backend} compiler not loadable here: {e}")
    bundle, names = emit_bundle(tmp_path, target)
    ctx.load_bundle(bundle)
    for name in names:
        try:
            ctx.kernel_by_name(name)
        except kvgen.KvgenError as e:
            if e.status_name == "KVGEN_ERROR_BACKEND_UNAVAILABLE":
                pytest.skip(f"{backend} compiler not loadable here: {e}")
            raise
    stats = ctx.stats()
    assert stats["compiles"] == len(SPECS)
    # The disk cache now holds one verified entry per kernel.
    entries = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()
               and not p.name.endswith(".lock")]
    assert len(entries) >= len(SPECS)
