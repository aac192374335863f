"""The emitted kernels compile in-process with the vendors' compilers, with
no GPU: NVRTC to an sm_90 cubin and Debian's comgr to a gfx90a code object,
through the runtime's compile-only contexts. Any compiler warning fails a
compile (the runtime treats it as an error). Run by the integration suite
(Vendor/nvrtc.test, Vendor/comgr.test, behind the features nvrtc / comgr):

    %python %S/Inputs/compile_emitted.py cuda sm_90 %t | FileCheck %s

Prints `compiled NAME` for each kernel and a closing count line; exits
non-zero on the first failure. Needs kvgen on PATH (lit puts the build's
bin/ there) and the binding (PYTHONPATH, KVGEN_LIB: set by lit.cfg.py).
"""

import shutil
import subprocess
import sys
from pathlib import Path

import kvgen

KVGEN = shutil.which("kvgen")

MIMO = dict(num_kv_heads=4, head_size_k=192, head_size_v=128, block_size=16)
# DeepSeek-V3's MLA latent row (kv_c 512 + k_pe 64), fp8.
MLA_FP8 = kvgen.Layout(1, block_size=64, dtype="f8E4M3FN", scale="per_tensor",
                       packing="packed",
                       components=[("kv_c", 512), ("k_pe", 64)])
# (layout, op, io or None for ops without one, extra flags): the MiMo
# geometry in each cache dtype and layout family, odd head sizes, a
# 576-wide packed row, dynamic strides, the block copies and MLA.
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
     ["--slots", "i32"]),
    (kvgen.Layout(8, 46, 46, 16, dtype="f16"), "reshape_and_cache", "f16",
     ["--unchecked"]),
    (kvgen.Layout(8, 80, 80, 32), "gather", "bf16", []),
    (kvgen.Layout(1, 512, 64, 64, packing="packed"), "reshape_and_cache",
     "bf16", []),
    (kvgen.Layout(**MIMO, k_strides=(None, 768, 192),
                  v_strides=(None, None, 128)), "reshape_and_cache", "bf16",
     []),
    (kvgen.Layout(**MIMO, dtype="f8E4M3FN", order="hnd"), "copy_blocks",
     None, ["--unchecked"]),
    (kvgen.Layout(**MIMO, dtype="f8E4M3FN", scale="per_tensor"),
     "swap_blocks", None, []),
    (MLA_FP8, "concat_and_cache_mla", "bf16", []),
    (MLA_FP8, "gather_mla", "bf16", ["--dequantize"]),
    (MLA_FP8, "copy_blocks", None, []),
]

def emit_bundle(directory, target):
    for i, (layout, op, io, extra) in enumerate(SPECS):
        f = directory / f"layout{i}.mlir"
        f.write_text(f"#kv.layout<{layout.text}>\n")
        cmd = [KVGEN, "emit", "--layout", str(f), "--op", op,
               "--target", target, "--bundle", str(directory / "bundle")]
        if io is not None:
            cmd += ["--io", io]
        r = subprocess.run(cmd + extra, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd + extra)} failed:\n{r.stdout}{r.stderr}")
    names = [line.split("=", 1)[1].strip()
             for line in (directory / "bundle" / "kvgen-manifest.txt")
             .read_text().splitlines() if line.startswith("name")]
    if len(names) != len(SPECS):
        sys.exit(f"{len(names)} kernels in the bundle, {len(SPECS)} emitted")
    return directory / "bundle", names


def main():
    backend, target, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    if KVGEN is None:
        sys.exit("kvgen not on PATH")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    ctx = kvgen.Context.compile_only(backend, target,
                                     cache_dir=str(work / "cache"))
    bundle, names = emit_bundle(work, target)
    ctx.load_bundle(bundle)
    for name in names:
        ctx.kernel_by_name(name)  # KvgenError (non-zero exit) on failure
        print(f"compiled {name}")
    stats = ctx.stats()
    # The disk cache now holds one verified entry per kernel.
    entries = [p for p in (work / "cache").rglob("*") if p.is_file()
               and not p.name.endswith(".lock")]
    print(f"{stats['compiles']} of {len(SPECS)} kernels compiled for "
          f"{target}, {len(entries)} disk cache entries")


if __name__ == "__main__":
    main()
