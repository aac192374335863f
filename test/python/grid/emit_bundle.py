#!/usr/bin/env python3
"""Emits kernels into one bundle directory with `kvgen emit`, on a machine
with the MLIR build: every kernel of the grid harness's case list
(cases.all_specs(): the GPU run of test/python/grid needs them all) and/or
of the benchmarks (bench/geometries.py). The bundle is then carried to the
GPU machine, where the harness (--backend cuda --bundle DIR) and
bench/bench.py look kernels up by spec. The harness's host backend emits
the kernels its selected tests need through emit() below.

  python3 test/python/grid/emit_bundle.py                 # .dev/bundle, sm_90
  python3 test/python/grid/emit_bundle.py --archive       # + .dev/bundle.tar.xz
  python3 test/python/grid/emit_bundle.py --target host --out /tmp/hb --set grid
  python3 test/python/grid/emit_bundle.py --cases chunked --out .dev/chunked

Each kernel is emitted (in parallel) into a one-kernel bundle (a shard,
kept in --shards between runs when given: a shard is reused while the
kvgen binary is unchanged); their manifest sections are merged into one
bundle in a temporary directory next to --out, checked (every spec
present, the runtime parses it) and moved into place. --archive also writes
OUT.tar.xz (the sources repeat the prelude: a bundle of the whole grid is
~60 MB, its archive well under 1 MB; carry that one).
"""

import argparse
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # test/python: grid, kvgen_ref
from grid import cases as C  # noqa: E402

REPO = C.REPO
sys.path.insert(0, str(REPO / "python"))
DEFAULT_BUNDLE = REPO / ".dev" / "bundle"


def bench_specs():
    """The benchmarks' kernels (bench/geometries.py) as KSpecs."""
    spec = importlib.util.spec_from_file_location(
        "kvgen_bench_geometries", REPO / "bench" / "geometries.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return [C.KSpec(op, f"#kv.layout<{text}>", tuple(opts.items()))
            for op, text, opts in mod.bench_kernels()]


def specs_of(which, cases=None):
    """Unique KSpecs of the harness ('grid'), the bench ('bench') or both;
    cases: a regular expression, the harness's cases whose names it
    finds only (and no bench kernels)."""
    seen = {}
    if cases is not None:
        return C.all_specs(re.compile(cases))
    if which in ("grid", "all"):
        seen.update(dict.fromkeys(C.all_specs()))
    if which in ("bench", "all"):
        seen.update(dict.fromkeys(bench_specs()))
    return list(seen)


def spec_key(op, layout, options):
    """Canonical identity of a kernel: op, the runtime's layout text, and
    every option of the op as text (defaults filled in from the op table;
    flags as 0/1). Needs the runtime library."""
    import kvgen
    lay = kvgen.Layout.parse(layout).text
    o = kvgen.ops()[op]
    given = dict(options)
    full = []
    for opt in o.options:
        if opt.name in given:
            v = given[opt.name]
            v = ("1" if v else "0") if isinstance(v, bool) else str(v)
        else:
            v = opt.default
        full.append((opt.name, v))
    return (op, lay, tuple(full))


def entry_key(e):
    """spec_key of a manifest entry (manifest v2: the op's options under
    their Ops.def names)."""
    import kvgen
    o = kvgen.ops()[e["op"]]
    return spec_key(e["op"], e["layout"],
                    {opt.name: e[opt.name] for opt in o.options
                     if opt.name in e})


def _identity(kv):
    st = Path(kv).stat()
    return f"{Path(kv).resolve()}:{st.st_size}:{st.st_mtime_ns}"


def _emit_one(kv, target, spec, work, shard):
    """Emits spec into the one-kernel bundle `shard` (atomically)."""
    if (shard / "kvgen-manifest.txt").exists():
        return None
    tmp = Path(tempfile.mkdtemp(prefix=shard.name + ".", dir=work))
    try:
        lf = tmp / "layout.mlir"
        lf.write_text(spec.layout + "\n")
        cmd = [str(kv), "emit", "--layout", str(lf), "--target", target,
               *spec.emit_args(), "--bundle", str(tmp / "b")]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return (f"failed ({r.returncode}): {' '.join(cmd)}\n"
                    f"{r.stdout}{r.stderr}")
        shard.parent.mkdir(parents=True, exist_ok=True)
        try:
            (tmp / "b").rename(shard)
        except OSError:
            if not (shard / "kvgen-manifest.txt").exists():
                raise
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def merge(shards, dest):
    """One bundle from one-kernel bundles: their `[kernel]` sections, as
    kvgen wrote them, under one header, plus their sources."""
    header, body, names = None, [], set()
    for sh in shards:
        lines = (sh / "kvgen-manifest.txt").read_text().splitlines()
        # The header: the lines before the first section (version, abi).
        n = lines.index("[kernel]") if "[kernel]" in lines else len(lines)
        if header is None:
            header = lines[:n]
        elif lines[:n] != header:
            raise ValueError(f"{sh}: manifest header {lines[:n]!r} differs "
                             f"from {header!r}")
        files = [f for f in sh.iterdir() if f.name != "kvgen-manifest.txt"]
        if any(f.name in names for f in files):
            continue  # the same kernel under two spellings of its spec
        body += lines[n:]
        for f in files:
            names.add(f.name)
            shutil.copyfile(f, dest / f.name)
    (dest / "kvgen-manifest.txt").write_text(
        "\n".join(header + ["# merged by test/python/grid/emit_bundle.py"] +
                  body) + "\n")


def emit(specs, target, out, kvgen_exe, jobs=None, shards=None, log=print):
    """Emits `specs` (KSpecs) for `target` into the bundle directory `out`
    (replaced). shards: a directory keeping one-kernel bundles between
    runs (default: a temporary one). Raises RuntimeError when a kernel
    does not emit or the merged manifest lacks a spec."""
    from kvgen import read_manifest
    kv = Path(kvgen_exe)
    if not kv.exists():
        raise RuntimeError(f"{kv} not found (ninja -C build kvgen)")
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=out.name + ".tmp.", dir=out.parent))
    t0 = time.time()
    ident = _identity(kv)
    try:
        sdir = Path(shards) if shards else work / "shards"
        paths = [sdir / hashlib.sha1(f"{ident}|{target}|{s!r}".encode())
                 .hexdigest()[:20] for s in specs]
        new = sum(not (p / "kvgen-manifest.txt").exists() for p in paths)
        with ThreadPoolExecutor(max(1, jobs or os.cpu_count() or 2)) as pool:
            errors = [e for e in pool.map(
                lambda i: _emit_one(kv, target, specs[i], work, paths[i]),
                range(len(specs))) if e]
        if errors:
            raise RuntimeError("\n".join(errors[:3]) +
                               f"\n({len(errors)} of {len(specs)} failed)")
        dest = work / "bundle"
        dest.mkdir()
        merge(paths, dest)
        entries = read_manifest(dest / "kvgen-manifest.txt")
        try:
            have = {entry_key(e) for e in entries if e["target"] == target}
            missing = [s for s in specs
                       if spec_key(s.op, s.layout, s.options) not in have]
        except OSError as e:  # no runtime library: names only
            log(f"emit_bundle: specs not checked against the manifest ({e})")
            missing = []
        if missing:
            raise RuntimeError(f"{len(entries)} entries for {len(specs)} "
                               "specs; missing: " +
                               "; ".join(str(m) for m in missing[:5]))
        if out.exists():
            shutil.rmtree(out)
        dest.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"emit_bundle: {len(specs)} kernels for {target} ({new} emitted, "
        f"{len(specs) - new} reused from {shards}) -> {out} "
        f"({time.time() - t0:.1f} s)" if shards else
        f"emit_bundle: {len(specs)} kernels for {target} -> {out} "
        f"({time.time() - t0:.1f} s)")
    return out


def backend_of(kvgen_bin, target):
    """The runtime backend that compiles for `target`, from the vendor
    column of `kvgen targets` (the target table, runtime/lib/Target.cpp)."""
    out = subprocess.run([str(kvgen_bin), "targets"], capture_output=True,
                         text=True, check=True).stdout
    name = target.split(":")[0]
    for line in out.splitlines():
        cols = line.split()
        if cols and not line.startswith("#") and cols[0] == name:
            return {"nvidia": "cuda", "amd": "hip", "host": "host"}[cols[1]]
    sys.exit(f"emit_bundle: unknown target {target!r}")


def check_compile(bundle, target, specs, kvgen_bin):
    """Compiles every spec through the runtime (compile-only context, a
    throw-away disk cache); exits non-zero on the first failure."""
    import kvgen
    backend = backend_of(kvgen_bin, target)
    with tempfile.TemporaryDirectory() as cache:
        ctx = kvgen.Context.compile_only(backend, target, cache_dir=cache)
        ctx.load_bundle(str(bundle))
        t0 = time.time()
        for s in specs:
            try:
                ctx.kernel(s.op, s.layout, **s.opts())
            except kvgen.KvgenError as e:
                sys.exit(f"emit_bundle: {s} does not compile: {e}")
        st = ctx.stats()
        ctx.close()
    print(f"emit_bundle: all {len(specs)} kernels compile for "
          f"{target} ({st['compiles']} compiles, "
          f"{(time.time() - t0) / max(1, len(specs)) * 1e3:.0f} ms each)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    build = Path(os.environ.get("KVGEN_BUILD_DIR", REPO / "build"))
    ap.add_argument("--kvgen", default=str(build / "bin" / "kvgen"))
    ap.add_argument("--lib", help="libkvgen-runtime.so (sets KVGEN_LIB; "
                    "default: the binding's search)")
    ap.add_argument("--out", default=str(DEFAULT_BUNDLE))
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--set", default="all", choices=("grid", "bench", "all"))
    ap.add_argument("--cases", metavar="REGEX",
                    help="only the kernels of the harness's cases whose "
                    "names REGEX finds (e.g. chunked: the chunked layouts); "
                    "instead of --set")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--shards", help="keep one-kernel bundles here between "
                    "runs")
    ap.add_argument("--archive", action="store_true",
                    help="also write OUT.tar.xz (to carry)")
    ap.add_argument("--check-compile", action="store_true",
                    help="also compile every kernel with a compile-only "
                    "context for --target (needs NVRTC here for sm_NN)")
    args = ap.parse_args()
    if args.lib:
        os.environ["KVGEN_LIB"] = str(Path(args.lib).resolve())
    specs = specs_of(args.set, args.cases)
    if not specs:
        sys.exit(f"emit_bundle: no case name matches --cases {args.cases}")
    try:
        out = emit(specs, args.target, args.out, args.kvgen, args.jobs,
                   args.shards)
    except RuntimeError as e:
        sys.exit(f"emit_bundle: {e}")
    if args.check_compile:
        check_compile(out, args.target, specs, args.kvgen)
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"emit_bundle: {out}: {size / 2**20:.1f} MiB")
    if args.archive:
        tar = out.parent / (out.name + ".tar.xz")
        with tarfile.open(tar, "w:xz") as t:
            t.add(out, arcname=out.name)
        print(f"emit_bundle: {tar}: {tar.stat().st_size / 2**20:.2f} MiB "
              f"(unpack with: tar -xJf {tar.name} -C {tar.parent})")


if __name__ == "__main__":
    main()
