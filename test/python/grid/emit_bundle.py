#!/usr/bin/env python3
"""Emits every kernel of the device grid and/or the benchmarks
(scripts/grid_spec.py) into one bundle directory with `kvgen emit`, on a
machine with the MLIR build. The bundle is then carried to the GPU machine
(scripts/device_grid.py, bench/bench.py look kernels up by spec).

  python3 scripts/emit_device_bundle.py                  # .dev/bundle, sm_90
  python3 scripts/emit_device_bundle.py --target host --out /tmp/hb --set grid

Each kernel is emitted (in parallel) into a one-kernel bundle; their
manifest sections are merged into one bundle in a temporary directory next
to --out, checked (every spec present, the runtime parses it) and moved into
place.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import grid_spec as G  # noqa: E402
from kvgen import read_manifest  # noqa: E402


def spec_of(e):
    # Manifest v2: the op's options under their Ops.def names.
    return G.KSpec(e["op"], G.Layout.parse(e["layout"]).text, e["io"],
                   e["slots"], e.get("checked", "0") == "1",
                   e.get("dequantize", "0") == "1")


def emit_one(kv, target, spec, layout_file, shard):
    cmd = [str(kv), "emit", "--layout", str(layout_file), "--target", target,
           *spec.emit_args(), "--bundle", str(shard)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return (f"failed ({r.returncode}): {' '.join(cmd)}\n"
                f"{r.stdout}{r.stderr}")
    return None


def merge(shards, dest):
    """One bundle from one-kernel bundles: their `[kernel]` sections, as
    kvgen wrote them, under one header, plus their sources."""
    header, body = None, []
    for sh in shards:
        lines = (sh / "kvgen-manifest.txt").read_text().splitlines()
        # The header: the lines before the first section (version, abi).
        n = lines.index("[kernel]") if "[kernel]" in lines else len(lines)
        if header is None:
            header = lines[:n]
        elif lines[:n] != header:
            raise ValueError(f"{sh}: manifest header {lines[:n]!r} differs "
                             f"from {header!r}")
        body += lines[n:]
        for f in sh.iterdir():
            if f.name != "kvgen-manifest.txt":
                if (dest / f.name).exists():
                    raise ValueError(f"two kernels write {f.name}")
                shutil.copyfile(f, dest / f.name)
    (dest / "kvgen-manifest.txt").write_text(
        "\n".join(header + ["# merged by scripts/emit_device_bundle.py"] +
                   body) + "\n")


def check_loads(dest):
    """The runtime parses the merged manifest (host context; entries of
    other targets are kept, not compiled)."""
    try:
        sys.path.insert(0, str(G.REPO / "python"))
        import kvgen
        ctx = kvgen.Context("host")
    except Exception as e:  # noqa: BLE001  (no runtime library here)
        print(f"emit_device_bundle: not checked with the runtime ({e})")
        return
    ctx.load_bundle(str(dest))
    ctx.close()


def check_compile(bundle, target, specs):
    """Compiles every spec through the runtime (compile-only context, a
    throw-away disk cache); exits non-zero on the first failure."""
    sys.path.insert(0, str(G.REPO / "python"))
    import kvgen
    backend = ("cuda" if target.startswith("sm_") else
               "hip" if target.startswith("gfx") else "host")
    with tempfile.TemporaryDirectory() as cache:
        ctx = kvgen.Context.compile_only(backend, target, cache_dir=cache)
        ctx.load_bundle(str(bundle))
        t0 = time.time()
        for s in specs:
            try:
                ctx.kernel(s.op, s.layout, s.io, s.slots, s.checked,
                           s.dequantize)
            except kvgen.KvgenError as e:
                sys.exit(f"emit_device_bundle: {s} does not compile: {e}")
        st = ctx.stats()
        ctx.close()
    print(f"emit_device_bundle: all {len(specs)} kernels compile for "
          f"{target} ({st['compiles']} compiles, "
          f"{(time.time() - t0) / max(1, len(specs)) * 1e3:.0f} ms each)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvgen", default=str(G.REPO / "build" / "bin" /
                                           "kvgen"))
    ap.add_argument("--out", default=str(G.DEFAULT_BUNDLE))
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--set", default="all", choices=("grid", "bench", "all"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--check-compile", action="store_true",
                    help="also compile every kernel with a compile-only "
                    "context for --target (needs NVRTC here for sm_NN)")
    args = ap.parse_args()
    kv = Path(args.kvgen)
    if not kv.exists():
        sys.exit(f"emit_device_bundle: {kv} not found (ninja -C build kvgen)")
    specs = G.all_kernels(args.set)
    out = Path(args.out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=out.name + ".tmp.", dir=out.parent))
    t0 = time.time()
    try:
        layouts = {}
        for s in specs:
            if s.layout not in layouts:
                lf = work / f"layout{len(layouts)}.mlir"
                lf.write_text(f"#kv.layout<{s.layout}>\n")
                layouts[s.layout] = lf
        shards = [work / f"k{i:04d}" for i in range(len(specs))]
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            errors = [e for e in pool.map(
                lambda i: emit_one(kv, args.target, specs[i],
                                   layouts[specs[i].layout], shards[i]),
                range(len(specs))) if e]
        if errors:
            sys.exit("emit_device_bundle: " + "\n".join(errors[:3]) +
                     f"\n({len(errors)} of {len(specs)} failed)")
        dest = work / "bundle"
        dest.mkdir()
        merge(shards, dest)
        entries = read_manifest(dest / "kvgen-manifest.txt")
        have = {spec_of(e) for e in entries if e["target"] == args.target}
        missing = [s for s in specs if s not in have]
        if missing or len(entries) != len(specs):
            sys.exit(f"emit_device_bundle: {len(entries)} entries for "
                     f"{len(specs)} specs; missing: " +
                     "; ".join(str(m) for m in missing[:5]))
        check_loads(dest)
        if out.exists():
            shutil.rmtree(out)
        dest.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.check_compile:
        check_compile(out, args.target, specs)
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"emit_device_bundle: {len(specs)} kernels for {args.target} -> "
          f"{out} ({size / 2**20:.1f} MiB, {time.time() - t0:.1f} s)")


if __name__ == "__main__":
    main()
