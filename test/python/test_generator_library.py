"""The generator library libkvgen-generator.so (kvgen/generator_abi.h): the
MLIR code generator as one self-contained shared library that the runtime
dlopens to JIT layouts no bundle has.

Checks: no dynamic dependency on libMLIR/libLLVM and only the C entry
exported; the stripped size; its sources equal the MLIR CLI's (`kvgen emit`,
which generates in-process) byte for byte; through the runtime a layout no
bundle has is generated, compiled and run on the host; a second process on
the same cache directory neither loads the library nor compiles.
Skipped, with the reason, when the build has no generator library (an
MLIR-free build) or no `kvgen` CLI.
"""

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import kvgen  # noqa: E402

BUILD = Path(os.environ.get("KVGEN_BUILD_DIR", REPO / "build"))
GEN = BUILD / "lib" / "libkvgen-generator.so"
KVGEN = BUILD / "bin" / "kvgen"
EXPORTS = {"kvgen_generator_api_version", "kvgen_generator_version",
           "kvgen_generator_kernel_abi", "kvgen_generator_emit",
           "kvgen_generator_free_kernel", "kvgen_generator_free_string"}

pytestmark = pytest.mark.skipif(
    not GEN.is_file(), reason=f"{GEN} not built (an MLIR-free build?)")


# kvgen_generated_kernel of generator_abi.h, API version GENERATED_API (the
# test asserts the library's version, so a changed struct fails here instead
# of the library writing past a stale mirror).
GENERATED_API = 4
_GEOMETRY = ("threads", "tokens_per_cta", "vector_bytes", "small_max_tokens",
             "small_threads", "rows_per_cta", "row_group", "item_ctas",
             "split_ctas", "split_min_tokens", "split_align", "partial_bytes",
             "dependent_launch", "dynamic_smem_bytes")


class Generated(ctypes.Structure):
    _fields_ = [("source", ctypes.c_void_p),
                ("entry_name", ctypes.c_char_p)] + \
        [(n, ctypes.c_int32) for n in _GEOMETRY]


def _tool(name):
    from shutil import which
    path = which(name)
    if path is None:
        pytest.skip(f"{name} not found")
    return path


def test_no_mlir_or_llvm_dependency_and_only_the_c_entry():
    out = subprocess.run([_tool("readelf"), "-d", str(GEN)],
                         capture_output=True, text=True, check=True).stdout
    needed = [line.split("[")[1].rstrip("]") for line in out.splitlines()
              if "(NEEDED)" in line]
    assert needed, out
    assert not [n for n in needed if "MLIR" in n or "LLVM" in n], needed
    syms = subprocess.run([_tool("nm"), "-D", "--defined-only", str(GEN)],
                          capture_output=True, text=True,
                          check=True).stdout.split()
    exported = {s.split("@")[0] for s in syms if s.startswith("kvgen")}
    assert exported == EXPORTS
    # Nothing else but the version node.
    others = [s for s in syms[2::3] if not s.startswith(("kvgen_generator",
                                                         "KVGEN_GENERATOR"))]
    assert others == [], others[:10]


def test_size_stripped():
    size = GEN.stat().st_size
    print(f"libkvgen-generator.so: {size} bytes ({size / 2**20:.1f} MiB)")
    assert size <= 40 * 2**20


@pytest.mark.parametrize("op,layout_args,options,target", [
    ("reshape_and_cache", ["--preset", "mimo-v2-flash"], ["--io", "bf16"],
     "sm_90"),
    ("gather", ["--preset", "mimo-v2-flash-fp8"],
     ["--io", "bf16", "--dequantize"], "gfx942"),
    ("concat_and_cache_mla", ["--preset", "deepseek-v3-mla"],
     ["--io", "f16", "--slots", "i32", "--unchecked"], "host"),
    ("paged_attention", ["--preset", "mimo-v2-flash"],
     ["--io", "bf16", "--num_q_heads", "64"], "sm_90"),
    ("copy_blocks", ["--preset", "llama3-8b"], [], "sm_90"),
])
def test_same_source_as_the_cli(op, layout_args, options, target):
    if not (KVGEN.is_file() and os.access(KVGEN, os.X_OK)):
        pytest.skip(f"{KVGEN} not built")
    cli = subprocess.run([str(KVGEN), "emit", *layout_args, "--op", op,
                          "--target", target, *options],
                         capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    lib = ctypes.CDLL(str(GEN))
    assert lib.kvgen_generator_api_version() == GENERATED_API
    lib.kvgen_generator_emit.argtypes = [ctypes.c_char_p] * 4 + [
        ctypes.POINTER(Generated), ctypes.POINTER(ctypes.c_char_p)]
    preset = layout_args[1]
    lay = _preset_layout(preset)
    opts = []
    it = iter(options)
    for o in it:
        if o in ("--io", "--slots", "--num_q_heads"):
            opts.append(f"{o[2:]} = {next(it)}")
        else:
            opts.append(o[2:])
    g = Generated()
    err = ctypes.c_char_p()
    rc = lib.kvgen_generator_emit(op.encode(), lay.encode(),
                                  ", ".join(opts).encode(), target.encode(),
                                  ctypes.byref(g), ctypes.byref(err))
    assert rc == 0, err.value
    # The launch geometry comes along, row tiles and split-KV included.
    assert g.threads > 0 and g.vector_bytes > 0
    if op == "paged_attention":
        assert g.rows_per_cta == 16 and g.row_group == 16 and \
            g.item_ctas == 4 and g.split_ctas > 0 and g.partial_bytes > 0
    else:
        assert g.rows_per_cta == 0
    # The plan's dependent launch (griddepcontrol): sm_90 kernels other
    # than attention, nowhere else.
    assert g.dependent_launch == int(target == "sm_90" and
                                     op != "paged_attention")
    source = ctypes.string_at(g.source).decode()
    lib.kvgen_generator_free_kernel(ctypes.byref(g))
    assert source == cli.stdout


def _preset_layout(name):
    """The layout text of preset `name` (`kvgen presets` prints each name,
    then its layout on the next line)."""
    lines = subprocess.run([str(KVGEN), "presets"], capture_output=True,
                           text=True, check=True).stdout.splitlines()
    for i, line in enumerate(lines):
        if line.split() and line.split()[0] == name:
            return lines[i + 1].strip()
    raise AssertionError(f"no preset {name}")


CHILD = r"""
import sys, json
sys.path.insert(0, sys.argv[1])
import numpy as np, kvgen
lay = kvgen.Layout(5, 96, 40, 8, dtype="f16", order="hnd")
ctx = kvgen.Context("host")
k = ctx.kernel("reshape_and_cache", lay, io="f16", slots="i32")
T, nb = 9, 3
rng = np.random.default_rng(3)
key = rng.standard_normal((T, 5, 96)).astype(np.float16)
value = rng.standard_normal((T, 5, 40)).astype(np.float16)
kc = np.zeros(lay.extent_bytes("k", nb) // 2, np.float16)
vc = np.zeros(lay.extent_bytes("v", nb) // 2, np.float16)
slots = np.arange(T, dtype=np.int32) * 2
k.reshape_and_cache(key, value, kc, vc, slots, num_blocks=nb)
kb, kt, kh = lay.strides("k")
ok = all(np.array_equal(kc[(s // 8) * kb + (s % 8) * kt + h * kh:][:96],
                        key[t, h]) for t, s in enumerate(slots)
         for h in range(5))
maps = open("/proc/self/maps").read()
print(json.dumps({"ok": bool(ok), "stats": ctx.stats(),
                  "generator_mapped": "libkvgen-generator" in maps}))
"""


def test_two_processes_share_the_generated_kernel(tmp_path):
    import json
    if not Path("/proc/self/maps").exists():
        pytest.skip("no /proc/self/maps to see what a process mapped")
    env = dict(os.environ, KVGEN_CACHE_DIR=str(tmp_path / "cache"),
               KVGEN_GENERATOR=str(GEN))
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", CHILD, str(REPO / "python")],
                           capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["ok"] and second["ok"]
    assert first["generator_mapped"] and first["stats"]["compiles"] == 1
    # The second finds source and binary in the disk cache.
    assert not second["generator_mapped"]
    assert second["stats"]["compiles"] == 0
    assert second["stats"]["disk_hits"] == 1


def test_plan_options_are_part_of_the_generated_source_key(tmp_path):
    """KVGEN_PLAN_OPTIONS (the A/B knob) changes the generated source, so a
    source cached without it must not serve a run with it, nor the reverse
    (an A/B through the JIT would otherwise compare one kernel with
    itself)."""
    import json
    if not Path("/proc/self/maps").exists():
        pytest.skip("no /proc/self/maps to see what a process mapped")
    base = dict(os.environ, KVGEN_CACHE_DIR=str(tmp_path / "cache"),
                KVGEN_GENERATOR=str(GEN))
    base.pop("KVGEN_PLAN_OPTIONS", None)

    def run(**extra):
        r = subprocess.run([sys.executable, "-c", CHILD, str(REPO / "python")],
                           capture_output=True, text=True,
                           env=dict(base, **extra))
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])

    plain = run()
    varied = run(KVGEN_PLAN_OPTIONS="threads=64")
    again = run(KVGEN_PLAN_OPTIONS="threads=64")
    assert plain["ok"] and varied["ok"] and again["ok"]
    # Generated and compiled anew with the option, then found on disk.
    assert varied["generator_mapped"] and varied["stats"]["compiles"] == 1
    assert not again["generator_mapped"]
    assert again["stats"]["compiles"] == 0
    # An option the pass rejects fails even where a plain source is cached.
    r = subprocess.run([sys.executable, "-c", CHILD, str(REPO / "python")],
                       capture_output=True, text=True,
                       env=dict(base, KVGEN_PLAN_OPTIONS="bogus=1"))
    assert r.returncode != 0 and "no such option bogus" in r.stderr, r.stderr


def test_binding_reports_the_library():
    kvgen.set_generator_path(str(GEN))
    try:
        assert kvgen.generator_path() == str(GEN)
        kvgen.set_generator_path("")
        assert kvgen.generator_path() is None
        with pytest.raises(kvgen.KvgenError, match="INVALID_ARGUMENT"):
            kvgen.set_generator_path(str(GEN.parent / "no-such-file.so"))
    finally:
        kvgen.set_generator_path(None)
