#!/usr/bin/env python3
"""Where the JIT time of each preset kernel goes (NVRTC and ptxas, no GPU).

For every kernel `kvgen run --preset NAME` JIT-compiles (the kernels of
scripts/compare_ptx.py --presets), `kvgen emit --target sm_90` prints the
source and this script measures, in CPU milliseconds of this process (user
+ system, all threads; robust against other processes on a shared
machine, unlike wall time):

  fe_ms      NVRTC with --fdevice-syntax-only: the C++ front end (parse,
             template instantiation), no NVVM IR;
  ptx_ms     NVRTC to PTX only (--gpu-architecture=compute_90a): front end
             and NVVM (ptx_ms - fe_ms: NVVM IR generation, optimizer and
             code generator);
  cubin_ms   NVRTC to a cubin with the runtime's options
             (runtime/src/BackendCuda.cpp options(), --split-compile=0
             included, and its entry defines -DKVGEN_ONE_ENTRY
             -DKVGEN_ENTRY_<name>: the plain entry only, Launch.h
             kOneEntryMacro), what a cold kvgen_context_get_kernel
             compiles before cuModuleLoadData (cubin_ms - ptx_ms: ptxas,
             about);
  twin_ms    the same for the `_pdl` entry (-DKVGEN_ENTRY_<name>_pdl):
             what the kernel's first programmatic dependent launch
             compiles ('-': no twin);
  both_ms    the whole source (both entries) to a cubin: what the runtime
             compiled before it compiled one entry at a time;
  t_fe/t_opt/t_as  NVRTC's own --time phases of the cubin compile (front
             end, NVVM optimizer, ptxas; ms of wall time, so inflated on a
             loaded machine);
  ptx_kb, cubin_kb, regs/spills per entry (ptxas -v on the PTX).

The median of --repeat compiles is reported (--stat min: the smallest).
NVRTC's compute cache (the
CUDA driver's, used by NVRTC 13 when libcuda is present) is disabled with
CUDA_CACHE_DISABLE=1 so that a compile is never served from an earlier
process's result.

  python3 scripts/jit_times.py --kvgen build/bin/kvgen --presets all \\
      --repeat 3 [--options '-Xptxas -O1 ...'] [--json out.json]

The fe, ptx and cubin columns and the phases, sizes and registers are of
the plain entry (the runtime's entry defines; a source emitted before the
entry guards has none, so they cover its every entry).

--base KVGEN [--base-lib DIR] instead compares two builds: each preset
kernel emitted by both, the two sources compiled to cubins in turn
(--repeat times each, runtime options and entry defines for the plain
entry: what a cold kvgen_context_get_kernel of each build compiles), the
median CPU ms of each, the new build's twin (twin_ms, as above), and
whether their PTX (whole sources, no entry defines) is the same:

  python3 scripts/jit_times.py --base /tmp/base/bin/kvgen \\
      --base-lib /tmp/base/lib --kvgen build/bin/kvgen --repeat 7

--check-options OPTS instead compiles each kernel to a cubin without and
with the extra NVRTC options OPTS and compares the SASS of every function
(cuobjdump -sass from --cuobjdump, else the raw .text sections through
objcopy): exit status 1 when any differs. With --extra the kernels of
compare_ptx.py --extra (every attention geometry of test_attention.py,
copy/swap and MLA of every preset) are checked too. Every kernel is
compiled without OPTS before any is compiled with them: NVRTC 13.0 keeps
state across the compiles of one process (after one compile with
-Ofast-compile=mid, compiles without it give other PTX).
"""

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ["CUDA_CACHE_DISABLE"] = "1"  # before NVRTC is loaded

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compare_ptx as C  # noqa: E402  (scripts/compare_ptx.py)

# runtime/src/BackendCuda.cpp options() after --gpu-architecture.
RUNTIME_OPTIONS = ["-std=c++17", "--split-compile=0"]
# The programmatic-dependent-launch twin's suffix (Launch.h
# kDependentLaunchEntrySuffix).
PDL_SUFFIX = "_pdl"


def entry_defines(entry):
    """What BackendCuda.cpp compile() adds for `entry` (Launch.h
    kOneEntryMacro, kEntryMacroPrefix)."""
    return ["-DKVGEN_ONE_ENTRY", f"-DKVGEN_ENTRY_{entry}"]


def entry_of(src):
    """(plain entry name, whether the source has its `_pdl` twin)."""
    name = re.search(r"kvgen-kernel: name=(\w+)", src).group(1)
    return name, f" {name}{PDL_SUFFIX}(" in src


def cpu_ms():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return (r.ru_utime + r.ru_stime) * 1e3


def nvrtc_cpu(nv, src, opts):
    """(CPU ms, result dict) of one nvrtcCompileProgram."""
    t0 = cpu_ms()
    ptx, log, _ = nv.compile(src, "kernel.cu", opts)
    return cpu_ms() - t0, ptx, log


def stat(values, how):
    """The median (how == 'median') or smallest of `values`."""
    return statistics.median(values) if how == "median" else min(values)


def phases(nv, src, opts):
    """NVRTC's --time CSV of one compile: {phase: ms}."""
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "time.csv"
        nv.compile(src, "kernel.cu", opts + [f"--time={f}"])
        out = {}
        for line in f.read_text().splitlines()[1:]:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 3:
                out[parts[1]] = out.get(parts[1], 0.0) + float(parts[2])
        return out


def ptxas_v(ptx, target):
    """(cubin bytes, {entry: 'R regs, S spill'}) of ptxas -v on `ptx`."""
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "k.ptx"
        p.write_text(ptx)
        # The PTX's own .target (sm_90 kernels are compiled as sm_90a, the
        # variant with wgmma; ptxas refuses sm_90a PTX for -arch=sm_90).
        m = re.search(r"^\.target\s+(sm_\w+)", ptx, re.M)
        arch = m.group(1) if m else target
        r = subprocess.run([f"{home}/bin/ptxas", f"-arch={arch}", "-v",
                            str(p), "-o", str(Path(d) / "k.cubin")],
                           capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(r.stderr)
        regs, entry = {}, None
        for line in r.stderr.splitlines():
            m = re.search(r"Compiling entry function '(\w+)'|Function "
                          r"properties for (\w+)", line)
            if m:
                entry = m.group(1) or m.group(2)
            m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads",
                          line)
            if m and entry:
                regs[entry] = f"{m.group(1)}/{m.group(2)} spill"
            m = re.search(r"Used (\d+) registers", line)
            if m and entry:
                regs[entry] = f"{m.group(1)} regs, " + regs.get(entry, "")
        return (Path(d) / "k.cubin").stat().st_size, regs


def cubin_of(nv, src, opts):
    """The cubin NVRTC makes of `src` (compare_ptx.Nvrtc returns PTX)."""
    import ctypes
    L = nv.lib
    prog = ctypes.c_void_p()
    if L.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"kernel.cu", 0,
                            None, None):
        raise RuntimeError("nvrtcCreateProgram failed")
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    try:
        if L.nvrtcCompileProgram(prog, len(opts), arr):
            raise RuntimeError(f"NVRTC failed with {opts}")
        n = ctypes.c_size_t()
        L.nvrtcGetCUBINSize(prog, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        L.nvrtcGetCUBIN(prog, buf)
        return buf.raw
    finally:
        L.nvrtcDestroyProgram(ctypes.byref(prog))


def sass_of(cubin, cuobjdump):
    """{function: its SASS text} (cuobjdump -sass), or {section: bytes} of
    the cubin's .text sections when no cuobjdump is given."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "k.cubin"
        p.write_bytes(cubin)
        if cuobjdump:
            out = subprocess.run([cuobjdump, "-sass", str(p)],
                                 capture_output=True, text=True,
                                 check=True).stdout
            funcs, name = {}, None
            for line in out.splitlines():
                m = re.match(r"\s*Function : (\S+)", line)
                if m:
                    name = m.group(1)
                    funcs[name] = []
                elif name:
                    funcs[name].append(line)
            return {k: "\n".join(v) for k, v in funcs.items()}
        heads = subprocess.run(["readelf", "-S", "-W", str(p)],
                               capture_output=True, text=True,
                               check=True).stdout
        secs = re.findall(r"\s(\.text\.\S+)", heads)
        out = {}
        for sec in secs:
            b = Path(d) / "sec.bin"
            subprocess.run(["objcopy", "-O", "binary", f"--only-section={sec}",
                            str(p), str(b)], check=True)
            out[sec] = b.read_bytes()
        return out


def check_options(args, nv, specs, extra):
    """Exit status: 0 when OPTS leaves every function's SASS unchanged."""
    arch = C.compiler_arch(args.kvgen, C.env_for(args.lib), args.target)
    base = [f"--gpu-architecture={arch}", "-std=c++17"]
    differ = 0
    with tempfile.TemporaryDirectory() as work:
        srcs = [C.emit(args.kvgen, args.lib, args.target, eargs, work)
                for _, eargs in specs]
        # Without OPTS first: an option such as -Ofast-compile changes the
        # code of the process's later compiles (see the module docstring).
        plain = [sass_of(cubin_of(nv, src, base), args.cuobjdump)
                 for src in srcs]
        for (label, _), src, a in zip(specs, srcs, plain):
            b = sass_of(cubin_of(nv, src, base + extra), args.cuobjdump)
            same = a == b and len(a) > 0
            differ += not same
            print(f"{'same' if same else 'DIFFERS'}: {label} ({len(a)} "
                  f"functions)", flush=True)
    print(f"jit_times: {len(specs)} kernels, {differ} with different SASS "
          f"under {' '.join(extra)}")
    return 1 if differ else 0


def compare_builds(args, nv, specs, cubin_opts, ptx_opts):
    """--base: per preset kernel, the median cubin CPU ms of the base and
    the new build's source (compiled in turn) and whether their PTX is the
    same. Exit status 1 when any PTX differs."""
    rows, differ = [], 0
    print(f"{'kernel':44s} {'base':>6s} {'new':>6s} {'delta':>6s} "
          f"{'twin':>6s}  ptx")
    with tempfile.TemporaryDirectory() as work:
        for label, eargs in specs:
            src = {"base": C.emit(args.base, args.base_lib, args.target, eargs,
                                  work),
                   "new": C.emit(args.kvgen, args.lib, args.target, eargs,
                                 work)}
            ptx = {w: nvrtc_cpu(nv, src[w], ptx_opts)[1] for w in src}
            name, twin = entry_of(src["new"])
            t = {"base": [], "new": [], "twin": []}
            for _ in range(max(1, args.repeat)):
                for w in ("base", "new"):
                    t[w].append(nvrtc_cpu(nv, src[w], cubin_opts +
                                          entry_defines(name))[0])
                if twin:
                    t["twin"].append(nvrtc_cpu(
                        nv, src["new"],
                        cubin_opts + entry_defines(name + PDL_SUFFIX))[0])
            row = {"kernel": label,
                   "base_ms": stat(t["base"], args.stat),
                   "new_ms": stat(t["new"], args.stat),
                   "twin_ms": stat(t["twin"], args.stat) if twin else None,
                   "same_ptx": ptx["base"] == ptx["new"]}
            differ += not row["same_ptx"]
            rows.append(row)
            twin_s = f"{row['twin_ms']:6.0f}" if twin else "     -"
            print(f"{label:44s} {row['base_ms']:6.0f} {row['new_ms']:6.0f} "
                  f"{row['new_ms'] - row['base_ms']:+6.0f} {twin_s}  "
                  f"{'same' if row['same_ptx'] else 'DIFFERS'}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"jit_times: {len(rows)} kernels, {differ} with different PTX")
    return 1 if differ else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvgen", default=str(HERE.parent / "build/bin/kvgen"))
    ap.add_argument("--lib", default="", help="LD_LIBRARY_PATH entry")
    ap.add_argument("--presets", default="all")
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="what of the --repeat compiles is reported")
    ap.add_argument("--base", default="",
                    help="kvgen of a base build: compare its preset "
                    "kernels' cubin CPU ms and PTX with --kvgen's")
    ap.add_argument("--base-lib", default="",
                    help="LD_LIBRARY_PATH entry for --base")
    ap.add_argument("--options", default="",
                    help="extra NVRTC options (space separated) for every "
                    "cubin compile")
    ap.add_argument("--json")
    ap.add_argument("--check-options", default="",
                    help="compare SASS without / with these NVRTC options")
    ap.add_argument("--cuobjdump", default="",
                    help="cuobjdump for --check-options (else .text bytes)")
    ap.add_argument("--extra", action="store_true",
                    help="--check-options: also compare_ptx.py --extra's "
                    "kernels")
    args = ap.parse_args()
    env = C.env_for(args.lib)
    names = [p for p in args.presets.split(",") if p]
    if names == ["all"]:
        out = subprocess.run([args.kvgen, "presets"], capture_output=True,
                             text=True, check=True, env=env).stdout
        names = [l.split()[0] for l in out.splitlines()
                 if l and not l[0].isspace()]
    specs = C.preset_specs(args.kvgen, env, names)
    nv = C.Nvrtc()
    if args.check_options:
        if args.extra:
            specs += C.extra_specs(args.kvgen, env)
        return check_options(args, nv, specs, args.check_options.split())
    base = RUNTIME_OPTIONS + args.options.split()
    # The runtime's architecture (sm_90 -> sm_90a, compare_ptx.compiler_arch).
    arch = C.compiler_arch(args.kvgen, env, args.target)
    cubin_opts = [f"--gpu-architecture={arch}"] + base
    ptx_opts = ["--gpu-architecture=compute_" + arch[3:]] + base
    if args.base:
        return compare_builds(args, nv, specs, cubin_opts, ptx_opts)
    rows = []
    print(f"{'kernel':44s} {'fe':>5s} {'ptx':>6s} {'cubin':>6s} {'twin':>6s} "
          f"{'both':>6s} {'t_fe':>5s} {'t_opt':>5s} {'t_as':>5s} {'src':>5s} "
          f"{'ptx':>5s} {'cubin':>5s}  regs (plain entry)")
    with tempfile.TemporaryDirectory() as work:
        for label, eargs in specs:
            src = C.emit(args.kvgen, args.lib, args.target, eargs, work)
            entry, twin = entry_of(src)
            plain = entry_defines(entry)
            nvrtc_cpu(nv, src, ptx_opts)  # page in / warm NVRTC
            t = {"fe": [], "ptx": [], "cubin": [], "twin": [], "both": []}
            ptx = None
            for _ in range(max(1, args.repeat)):
                t["fe"].append(nvrtc_cpu(
                    nv, src, ptx_opts + plain + ["--fdevice-syntax-only"])[0])
                dt, ptx, _ = nvrtc_cpu(nv, src, ptx_opts + plain)
                t["ptx"].append(dt)
                t["cubin"].append(nvrtc_cpu(nv, src, cubin_opts + plain)[0])
                if twin:
                    t["twin"].append(nvrtc_cpu(
                        nv, src,
                        cubin_opts + entry_defines(entry + PDL_SUFFIX))[0])
                    t["both"].append(nvrtc_cpu(nv, src, cubin_opts)[0])
            ph = phases(nv, src, cubin_opts + plain)
            cubin_bytes, regs = ptxas_v(ptx, args.target)
            row = {"kernel": label, "entry": entry,
                   "fe_ms": stat(t["fe"], args.stat),
                   "ptx_ms": stat(t["ptx"], args.stat),
                   "cubin_ms": stat(t["cubin"], args.stat),
                   "twin_ms": stat(t["twin"], args.stat) if twin else None,
                   "both_ms": stat(t["both"], args.stat) if twin else None,
                   "phases_ms": ph, "source_bytes": len(src),
                   "ptx_bytes": len(ptx), "cubin_bytes": cubin_bytes,
                   "entries": len(regs), "regs": regs}
            rows.append(row)
            tw = (f"{row['twin_ms']:6.0f} {row['both_ms']:6.0f}" if twin
                  else "     -      -")
            print(f"{label:44s} {row['fe_ms']:5.0f} {row['ptx_ms']:6.0f} "
                  f"{row['cubin_ms']:6.0f} "
                  f"{tw} {ph.get('CUDA C++ Frontend', 0):5.0f} "
                  f"{ph.get('NVVM Optimizer', 0):5.0f} "
                  f"{ph.get('PTX Translation', 0):5.0f} "
                  f"{len(src) / 1024:5.0f} {len(ptx) / 1024:5.0f} "
                  f"{cubin_bytes / 1024:5.0f}  {regs.get(entry, '?')}",
                  flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    sys.exit(main())
