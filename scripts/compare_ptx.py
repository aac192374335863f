#!/usr/bin/env python3
"""Compares the PTX of kernels emitted by two kvgen builds.

For every kernel spec of the grid harness and/or the benchmarks (the ones
test/python/grid/emit_bundle.py emits into the GPU bundle), or of a few
presets (--presets: the kernels `kvgen run --preset NAME` JIT-compiles),
each build's `kvgen emit` prints the source for --target, and NVRTC
compiles it with the runtime's options (runtime/src/BackendCuda.cpp:
--gpu-architecture=ARCH -std=c++17, ARCH the target's arch-specific
variant where it has one, sm_90 -> sm_90a: compiler_arch) to PTX. The two PTX texts are
compared line by line; the NVRTC compile time of each source is measured
(the smallest of --repeat compiles, both builds' compiles interleaved).

  # after a prelude change: is the PTX of every grid and bench kernel the
  # same as with the build of the base commit?
  python3 scripts/compare_ptx.py --base /tmp/base/bin/kvgen \\
      --new build/bin/kvgen --set all
  # compile times of the preset kernels, before and after
  python3 scripts/compare_ptx.py --base /tmp/base/bin/kvgen \\
      --new build/bin/kvgen --presets mimo-v2-flash,llama3-8b --repeat 3

--base-lib / --new-lib: a directory put first on LD_LIBRARY_PATH for that
build's kvgen (its libkvgen-runtime.so, when the build directory it was
linked in has changed since). NVRTC: libnvrtc.so from $CUDA_HOME/lib64
(default /usr/local/cuda) or the loader's search path.

Exit status: 0 when every kernel's PTX is identical, or differs only in
lines that are module-scope declarations (globals one prelude defines and
the other does not: listed when removed, counted when added), or has the
same instruction mix in another order or with other register numbers
(the multiset of its instruction lines, registers renamed to their class,
is the same: counted; this does not show that the data flow is the same,
the tests do); 1 otherwise; 2 when a kernel fails to emit or
compile.
"""

import argparse
import ctypes
import difflib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Module-scope PTX declarations: what a prelude that no longer defines a
# global (a __device__ / __constant__ variable, an extern function) loses.
GLOBAL_DECL = re.compile(r"^\s*(\.visible\s+|\.extern\s+|\.weak\s+)?"
                         r"(\.global|\.const|\.shared|\.func)\b")


def grid_specs(which):
    """(label, emit args after --target) of the grid/bench kernel specs."""
    sys.path.insert(0, str(REPO / "test" / "python"))
    sys.path.insert(0, str(REPO / "python"))
    from grid import emit_bundle as E
    return [(str(s), ["--layout-text", s.layout, *s.emit_args()])
            for s in E.specs_of(which)]


def preset_specs(kvgen, env, names):
    """The kernels `kvgen run --preset NAME` gets (tools/RunJob.cpp): the
    write with bf16 rows and i64 slots, the raw gather, for fp8 the
    dequantizing gather, and for K/V layouts paged_attention with bf16
    queries and 2 query heads per KV head."""
    out = subprocess.run([kvgen, "presets"], capture_output=True, text=True,
                         check=True, env=env).stdout
    layouts, name = {}, None
    for line in out.splitlines():
        if line and not line[0].isspace():
            name = line.split()[0]
        elif name and line.strip():
            layouts[name] = line.strip()
    specs = []
    for n in names:
        if n not in layouts:
            sys.exit(f"compare_ptx: no preset {n!r} ({', '.join(layouts)})")
        text = layouts[n]
        fp8 = "dtype = f8" in text
        p = ["--preset", n]
        if "components" in text:  # MLA: the latent row's write and gather
            specs += [(f"{n} concat_and_cache_mla", p + [
                "--op", "concat_and_cache_mla", "--io", "bf16", "--slots",
                "i64"]), (f"{n} gather_mla", p + ["--op", "gather_mla",
                                                  "--slots", "i64"])]
            if fp8:
                specs.append((f"{n} gather_mla dequantize", p + [
                    "--op", "gather_mla", "--io", "bf16", "--slots", "i64",
                    "--dequantize"]))
            continue
        heads = int(re.search(r"num_kv_heads = (\d+)", text).group(1))
        specs += [(f"{n} reshape_and_cache", p + [
            "--op", "reshape_and_cache", "--io", "bf16", "--slots", "i64"]),
                  (f"{n} gather", p + ["--op", "gather", "--slots", "i64"])]
        if fp8:
            specs.append((f"{n} gather dequantize", p + [
                "--op", "gather", "--io", "bf16", "--slots", "i64",
                "--dequantize"]))
        specs.append((f"{n} paged_attention", p + [
            "--op", "paged_attention", "--io", "bf16", "--num_q_heads",
            str(2 * heads)]))
    return specs


def extra_specs(kvgen, env):
    """Kernels of the ops the grid and bench sets lack: paged_attention for
    every geometry of test/python/test_attention.py (its options as that
    test emits them), and per preset (kvgen presets) copy_blocks and
    swap_blocks, and for MLA presets concat_and_cache_mla and gather_mla
    (raw and, for fp8, dequantizing)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "kvgen_test_attention", REPO / "test" / "python" / "test_attention.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    specs = []
    for name, g in mod.GEOS.items():
        args = ["--layout-text", f"#kv.layout<{g.layout().text}>", "--op",
                "paged_attention", "--io", g.io, "--num_q_heads",
                str(g.q_heads)]
        for flag, on in (("--sinks", g.sinks), ("--unchecked", not g.checked),
                         ("--logits_soft_cap", g.soft_cap)):
            if on:
                args.append(flag)
        specs.append((f"paged_attention ({name})", args))
    out = subprocess.run([kvgen, "presets"], capture_output=True, text=True,
                         check=True, env=env).stdout
    for line in out.splitlines():
        if not line or line[0].isspace():
            continue
        n = line.split()[0]
        for op in ("copy_blocks", "swap_blocks"):
            specs.append((f"{op} ({n})", ["--preset", n, "--op", op]))
        if "MLA" in line:
            specs += [(f"concat_and_cache_mla ({n})", [
                "--preset", n, "--op", "concat_and_cache_mla"]),
                      (f"gather_mla ({n})", ["--preset", n, "--op",
                                             "gather_mla"])]
            if "f8" in n or "fp8" in n:
                specs.append((f"gather_mla ({n}, dequantize)", [
                    "--preset", n, "--op", "gather_mla", "--io", "bf16",
                    "--dequantize"]))
    return specs


class Nvrtc:
    def __init__(self):
        home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
        for cand in (f"{home}/lib64/libnvrtc.so", "libnvrtc.so",
                     "libnvrtc.so.13", "libnvrtc.so.12"):
            try:
                self.lib = ctypes.CDLL(cand)
                break
            except OSError:
                continue
        else:
            raise RuntimeError("libnvrtc.so not found (set CUDA_HOME)")
        L = self.lib
        L.nvrtcGetErrorString.restype = ctypes.c_char_p

    def compile(self, source, name, options):
        """(ptx text, log, seconds in nvrtcCompileProgram)."""
        L = self.lib
        prog = ctypes.c_void_p()
        r = L.nvrtcCreateProgram(ctypes.byref(prog), source.encode(),
                                 name.encode(), 0, None, None)
        if r:
            raise RuntimeError("nvrtcCreateProgram: " +
                               L.nvrtcGetErrorString(r).decode())
        opts = (ctypes.c_char_p * len(options))(*[o.encode()
                                                  for o in options])
        t0 = time.perf_counter()
        r = L.nvrtcCompileProgram(prog, len(options), opts)
        dt = time.perf_counter() - t0
        n = ctypes.c_size_t()
        L.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        L.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        ptx = None
        if r == 0:
            L.nvrtcGetPTXSize(prog, ctypes.byref(n))
            buf = ctypes.create_string_buffer(n.value)
            L.nvrtcGetPTX(prog, buf)
            ptx = buf.value.decode()
        L.nvrtcDestroyProgram(ctypes.byref(prog))
        if r:
            what = L.nvrtcGetErrorString(r).decode()
            raise RuntimeError(f"NVRTC failed ({what}):\n{log}")
        return ptx, log, dt


_NVRTC = None


def env_for(lib):
    env = dict(os.environ)
    if lib:
        env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"]
                                        if env.get("LD_LIBRARY_PATH") else "")
    return env


def compiler_arch(kvgen, env, target):
    """The --gpu-architecture the runtime's CUDA backend compiles `target`
    for (kvgen/Target.h compilerArchitecture): TARGET + 'a' for an NVIDIA
    target whose `kvgen targets` capabilities include wgmma (an
    arch-specific instruction), else TARGET."""
    out = subprocess.run([kvgen, "targets"], capture_output=True, text=True,
                         check=True, env=env).stdout
    for line in out.splitlines():
        f = line.split(None, 5)
        if len(f) == 6 and f[0] == target and f[1] == "nvidia" and \
                "wgmma" in f[5].replace(",", " ").split():
            return target + "a"
    return target


def emit(kvgen, lib, target, args, work):
    """The source `kvgen emit` prints for `args` (--layout-text T: the
    layout written to a file first)."""
    args = list(args)
    if "--layout-text" in args:
        i = args.index("--layout-text")
        lf = Path(work) / "layout.mlir"
        lf.write_text(args[i + 1] + "\n")
        args[i:i + 2] = ["--layout", str(lf)]
    r = subprocess.run([kvgen, "emit", "--target", target, *args],
                       capture_output=True, text=True, env=env_for(lib))
    if r.returncode:
        raise RuntimeError(f"kvgen emit {' '.join(args)} failed:\n"
                           f"{r.stdout}{r.stderr}")
    return r.stdout


def one(job):
    """Emits and compiles one spec with both builds; returns a summary."""
    global _NVRTC
    label, args, a = job
    if _NVRTC is None:
        _NVRTC = Nvrtc()
    opts = [f"--gpu-architecture={a['arch']}", "-std=c++17"]
    res = {"label": label}
    try:
        with tempfile.TemporaryDirectory() as work:
            src = {w: emit(a[w], a[w + "_lib"], a["target"], args, work)
                   for w in ("base", "new")}
        times = {"base": [], "new": []}
        ptx = {}
        for _ in range(a["repeat"]):
            for w in ("base", "new"):
                p, log, dt = _NVRTC.compile(src[w], "kernel.cu", opts)
                if log.strip():
                    res.setdefault("logs", {})[w] = log
                ptx[w] = p
                times[w].append(dt)
    except RuntimeError as e:
        res["error"] = str(e)
        return res
    res["src_bytes"] = {w: len(src[w]) for w in src}
    res["seconds"] = {w: min(times[w]) for w in times}
    b, n = ptx["base"].splitlines(), ptx["new"].splitlines()
    if b == n:
        res["same"] = True
        return res
    res["same"] = False
    removed, added, other = [], [], []
    for line in difflib.unified_diff(b, n, "base", "new", n=0, lineterm=""):
        if line.startswith(("---", "+++", "@@")):
            continue
        if line.startswith("-") and GLOBAL_DECL.match(line[1:]):
            removed.append(line)
        elif line.startswith("+") and GLOBAL_DECL.match(line[1:]):
            added.append(line)
        else:
            other.append(line)
    res["removed_globals"] = removed
    res["added_globals"] = added
    res["other_diff"] = other
    res["same_instructions"] = instructions(b) == instructions(n)
    return res


REGISTER = re.compile(r"%[a-z]+\d+")


def instructions(ptx_lines):
    """The multiset of a PTX text's lines outside module-scope
    declarations, registers renamed to their class (%rd12 -> %rd): equal
    for two texts that execute the same instructions, with the same
    operand kinds and immediates, in another order or register
    assignment (what a change in LLVM's instruction order gives)."""
    out = {}
    for line in ptx_lines:
        if GLOBAL_DECL.match(line):
            continue
        key = REGISTER.sub(lambda m: m.group(0).rstrip("0123456789"),
                           line.strip())
        out[key] = out.get(key, 0) + 1
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="kvgen of the base build")
    ap.add_argument("--new", required=True, help="kvgen of the new build")
    ap.add_argument("--base-lib", default="")
    ap.add_argument("--new-lib", default="")
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--set", choices=("grid", "bench", "all"))
    ap.add_argument("--extra", action="store_true",
                    help="also the ops the grid and bench sets lack (see "
                    "extra_specs)")
    ap.add_argument("--presets", default="",
                    help="comma-separated preset names (kvgen presets), or "
                    "'all'")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--repeat", type=int, default=1,
                    help="compiles per source and build (the time is the "
                    "smallest)")
    ap.add_argument("--limit", type=int, default=0,
                    help="only the first N specs (0: all)")
    ap.add_argument("--json", help="write every kernel's result here")
    args = ap.parse_args()
    if not args.set and not args.presets and not args.extra:
        ap.error("give --set, --extra and/or --presets")
    specs = []
    if args.set:
        specs += grid_specs(args.set)
    if args.extra:
        specs += extra_specs(args.new, env_for(args.new_lib))
    if args.presets:
        names = [p for p in args.presets.split(",") if p]
        if names == ["all"]:
            out = subprocess.run([args.new, "presets"], capture_output=True,
                                 text=True, check=True,
                                 env=env_for(args.new_lib)).stdout
            names = [l.split()[0] for l in out.splitlines()
                     if l and not l[0].isspace()]
        specs += preset_specs(args.new, env_for(args.new_lib), names)
    if args.limit:
        specs = specs[:args.limit]
    common = {"base": args.base, "base_lib": args.base_lib, "new": args.new,
              "new_lib": args.new_lib, "target": args.target,
              "arch": compiler_arch(args.new, env_for(args.new_lib),
                                    args.target),
              "repeat": max(1, args.repeat)}
    t0 = time.time()
    results = []
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        for i, r in enumerate(pool.map(one, [(l, a, common)
                                             for l, a in specs])):
            results.append(r)
            if (i + 1) % 50 == 0:
                print(f"compare_ptx: {i + 1}/{len(specs)} "
                      f"({time.time() - t0:.0f} s)", file=sys.stderr)
    errors = [r for r in results if "error" in r]
    ok = [r for r in results if "error" not in r]
    same = [r for r in ok if r["same"]]
    globals_only = [r for r in ok if not r["same"] and not r["other_diff"]
                    and not r["added_globals"]]
    decls = [r for r in ok if not r["same"] and not r["other_diff"]
             and r["added_globals"]]
    reordered = [r for r in ok if not r["same"] and r["other_diff"]
                 and r["same_instructions"]]
    differ = [r for r in ok if not r["same"] and r["other_diff"]
              and not r["same_instructions"]]
    warned = [r for r in ok if r.get("logs")]
    print(f"compare_ptx: {len(results)} kernels for {args.target} "
          f"({common['arch']}): "
          f"{len(same)} identical PTX, {len(globals_only)} differing only "
          f"in removed module-scope declarations, {len(decls)} differing in "
          f"added ones (constants) only, {len(reordered)} with the same "
          f"instructions in another order / other registers, "
          f"{len(differ)} differing, "
          f"{len(errors)} failed ({time.time() - t0:.0f} s)")
    for r in globals_only[:20]:
        print(f"  removed only: {r['label']}")
        for line in r["removed_globals"][:10]:
            print(f"    {line}")
    for r in differ[:20]:
        print(f"  DIFFERS: {r['label']}")
        for line in (r["removed_globals"] + r["other_diff"])[:40]:
            print(f"    {line}")
    for r in warned[:10]:
        print(f"  NVRTC log ({r['label']}): {r['logs']}")
    for r in errors[:10]:
        print(f"  FAILED: {r['label']}: {r['error'][:2000]}")
    if ok:
        # Compile times by op: labels are "op(options) layout" (--set),
        # "op (what)" (--extra) or "preset op [dequantize]" (--presets).
        def op_of(label):
            w = label.split("(")[0].split()
            return w[1] if len(w) > 1 else w[0]
        by_op = {}
        for r in ok:
            by_op.setdefault(op_of(r["label"]), []).append(r)
        print("NVRTC compile seconds (per kernel; base -> new; mean, "
              "median, max):")
        for op, rs in sorted(by_op.items()):
            row = []
            for w in ("base", "new"):
                s = [r["seconds"][w] for r in rs]
                row.append(f"{statistics.mean(s):.3f} {statistics.median(s):.3f}"
                           f" {max(s):.3f}")
            sb = statistics.mean(r["src_bytes"]["base"] for r in rs)
            sn = statistics.mean(r["src_bytes"]["new"] for r in rs)
            print(f"  {op:24s} n={len(rs):4d}  {row[0]}  ->  {row[1]}  "
                  f"(source {sb / 1024:.0f} -> {sn / 1024:.0f} KiB)")
        if args.presets:
            print("per kernel (base -> new seconds):")
            for r in ok:
                print(f"  {r['label']:44s} {r['seconds']['base']:.3f} -> "
                      f"{r['seconds']['new']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if errors:
        return 2
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
