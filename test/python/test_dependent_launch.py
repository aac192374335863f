"""Programmatic dependent launch (issue 13) without a GPU.

kv-plan plans `dependent_launch` on sm_90 for every op but paged_attention:
the emitted source waits in griddepcontrol.wait before anything else and
then calls griddepcontrol.launch_dependents. Here:

* NVRTC (CUDA 13, the runtime's own compiler) turns the emitted sm_90
  kernels into PTX that has both instructions, the wait before the first
  global load, with an empty log (warnings would fail the runtime's
  compile); the sm_80 kernels and the sm_90 attention kernel have neither.
* Through the binding: Kernel.dependent_launch follows the plan on
  compile-only CUDA contexts (sm_90 yes, sm_80 and attention no); a pdl
  launch of an sm_90 kernel passes the flag check and stops at the
  compile-only check, one of a kernel without the plan is refused with
  KVGEN_ERROR_INVALID_ARGUMENT, as on the host backend, where nothing is
  written.
* The runtime compiles one entry at a time (-DKVGEN_ONE_ENTRY
  -DKVGEN_ENTRY_<entry>, Launch.h kOneEntryMacro): each define set keeps
  its entry alone, with the PTX that entry has in the whole source; a cold
  kernel compiles its plain entry only and its first pdl launch the twin,
  once, into a disk cache entry of its own.

Kernels come from the generator library (libkvgen-generator.so) and the
`kvgen` CLI of the build; skipped, with the reason, without them or NVRTC.
"""

import ctypes
import glob
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import kvgen  # noqa: E402
from kvgen import _capi  # noqa: E402

BUILD = Path(os.environ.get("KVGEN_BUILD_DIR", REPO / "build"))
KVGEN = BUILD / "bin" / "kvgen"

MIMO = kvgen.Layout(4, 192, 128, 16)
MLA = "num_kv_heads = 1, components = [kv_c: 512, k_pe: 64], " \
      "block_size = 16, packing = packed, dtype = bf16"
INVALID_ARGUMENT, COMPILE_ONLY = 1, 10

# (op, layout text, kvgen emit flags, kernel() options)
OPS = [
    ("reshape_and_cache", MIMO.text, ["--io", "bf16"], {"io_dtype": "bf16"}),
    ("gather", MIMO.text, ["--io", "bf16"], {"io_dtype": "bf16"}),
    ("copy_blocks", MIMO.text, [], {}),
    ("swap_blocks", MIMO.text, [], {}),
    ("concat_and_cache_mla", MLA, ["--io", "bf16"], {"io_dtype": "bf16"}),
    ("gather_mla", MLA, ["--io", "bf16"], {"io_dtype": "bf16"}),
]


def _need_cli():
    if not (KVGEN.is_file() and os.access(KVGEN, os.X_OK)):
        pytest.skip(f"{KVGEN} not built")


def _need_generator():
    try:
        kvgen.library_path()
    except OSError as e:
        pytest.skip(f"runtime library not loadable: {e}")
    if kvgen.generator_path() is None:
        pytest.skip("no generator library (libkvgen-generator.so)")


def _emit(tmp_path, op, layout, flags, target, extra=()):
    f = tmp_path / f"{op}-{target}.mlir"
    f.write_text(f"#kv.layout<{layout}>\n")
    r = subprocess.run([str(KVGEN), "emit", "--layout", str(f), "--op", op,
                        "--target", target, *flags, *extra],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


class Nvrtc:
    """libnvrtc through ctypes: source -> PTX text and log."""

    def __init__(self):
        names = ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"]
        for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                     "/usr/local/cuda"):
            if home:
                names += sorted(glob.glob(f"{home}/lib64/libnvrtc.so*"))
        self.lib = None
        for n in names:
            try:
                self.lib = ctypes.CDLL(n)
                break
            except OSError:
                continue
        if self.lib is None:
            pytest.skip("libnvrtc not loadable here")
        vp = ctypes.c_void_p
        L = self.lib
        L.nvrtcCreateProgram.argtypes = [ctypes.POINTER(vp), ctypes.c_char_p,
                                         ctypes.c_char_p, ctypes.c_int, vp, vp]
        L.nvrtcCompileProgram.argtypes = [vp, ctypes.c_int,
                                          ctypes.POINTER(ctypes.c_char_p)]
        for f in ("nvrtcGetProgramLogSize", "nvrtcGetPTXSize"):
            getattr(L, f).argtypes = [vp, ctypes.POINTER(ctypes.c_size_t)]
        for f in ("nvrtcGetProgramLog", "nvrtcGetPTX"):
            getattr(L, f).argtypes = [vp, ctypes.c_char_p]
        L.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(vp)]

    def ptx(self, source, arch, extra=()):
        """(return code, log, PTX) with the runtime's options
        (BackendCuda.cpp) and `extra`."""
        L = self.lib
        prog = ctypes.c_void_p()
        assert L.nvrtcCreateProgram(ctypes.byref(prog), source.encode(),
                                    b"k.cu", 0, None, None) == 0
        opts = [f"--gpu-architecture=compute_{arch[3:]}".encode(),
                b"-std=c++17"] + [o.encode() for o in extra]
        argv = (ctypes.c_char_p * len(opts))(*opts)
        rc = L.nvrtcCompileProgram(prog, len(opts), argv)
        n = ctypes.c_size_t()
        L.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(max(n.value, 1))
        L.nvrtcGetProgramLog(prog, log)
        ptx = ""
        if rc == 0:
            L.nvrtcGetPTXSize(prog, ctypes.byref(n))
            buf = ctypes.create_string_buffer(n.value)
            L.nvrtcGetPTX(prog, buf)
            ptx = buf.value.decode()
        L.nvrtcDestroyProgram(ctypes.byref(prog))
        return rc, log.value.decode(errors="replace").strip(), ptx


@pytest.fixture(scope="module")
def nvrtc():
    return Nvrtc()


def _entry_body(ptx, name):
    """The PTX of kernel `name`, from its .entry to the next one."""
    start = ptx.index(f".entry {name}(")
    nxt = ptx.find(".entry ", start + 1)
    return ptx[start:] if nxt < 0 else ptx[start:nxt]


@pytest.mark.parametrize("op,layout,flags,_opts", OPS)
def test_nvrtc_ptx_waits_before_the_first_global_access(tmp_path, nvrtc, op,
                                                        layout, flags, _opts):
    _need_cli()
    src = _emit(tmp_path, op, layout, flags, "sm_90")
    # The plan and the emitted call.
    assert "static constexpr bool dependent_launch = true;" in src
    name = re.search(r"kvgen-kernel: name=(\w+)", src).group(1)
    assert re.search(r"kvgen-kernel: name=\w+ .*dependent_launch=1", src)
    rc, log, ptx = nvrtc.ptx(src, "sm_90")
    assert rc == 0 and log == "", log
    # The kernel plain launches run has no prologue (it cost plain launches
    # time, docs/performance.md); its twin NAME_pdl (Launch.h
    # kDependentLaunchEntrySuffix), which programmatic dependent launches
    # run, waits first.
    assert "griddepcontrol" not in _entry_body(ptx, name)
    body = _entry_body(ptx, name + "_pdl")
    wait = body.index("griddepcontrol.wait;")
    go = body.index("griddepcontrol.launch_dependents;")
    # Nothing reads or writes global memory before the wait (parameters
    # are ld.param), and the dependents are released after it.
    assert wait < go
    for access in ("ld.global", "st.global", "atom.global"):
        first = body.find(access)
        assert first < 0 or first > wait, (access, body[:wait])
    # The runtime compiles one entry at a time (Launch.h kOneEntryMacro,
    # BackendCuda.cpp compile): each define set keeps exactly its entry,
    # whose PTX is that entry's PTX of the whole source.
    for entry, other in ((name, name + "_pdl"), (name + "_pdl", name)):
        rc, log, one = nvrtc.ptx(src, "sm_90", ["-DKVGEN_ONE_ENTRY",
                                                f"-DKVGEN_ENTRY_{entry}"])
        assert rc == 0 and log == "", log
        assert f".entry {other}(" not in one
        def fn(text):
            # The entry up to its closing brace, its labels without the
            # function's index, without declarations of shared buffers
            # (module-scope where two entries use one, in the entry where
            # it is alone: NVVM's "demoted variable", the block copies').
            body = _entry_body(text, entry)
            body = re.sub(r"(\$L__BB|__local_depot)\d+", r"\1", body)
            body = body[:body.rindex("\n}\n")]
            return [l for l in body.splitlines() if l.strip() and
                    not re.match(r"\s*(// demoted variable|\.shared )", l)]
        assert fn(one) == fn(ptx)
    # sm_80: the same op without either instruction, and no dependent_launch
    # in its plan.
    src80 = _emit(tmp_path, op, layout, flags, "sm_80")
    assert "static constexpr bool dependent_launch = false;" in src80
    assert "dependent_launch=1" not in src80
    name80 = re.search(r"kvgen-kernel: name=(\w+)", src80).group(1)
    rc, log, ptx80 = nvrtc.ptx(src80, "sm_80")
    assert rc == 0 and log == "", log
    assert f".entry {name80}(" in ptx80
    assert "_pdl(" not in ptx80
    assert "griddepcontrol" not in ptx80


def test_attention_is_not_planned_for_dependent_launch(tmp_path, nvrtc):
    _need_cli()
    src = _emit(tmp_path, "paged_attention", MIMO.text, ["--io", "bf16"],
                "sm_90", ["--num_q_heads", "64"])
    assert "static constexpr bool dependent_launch = false;" in src
    rc, log, ptx = nvrtc.ptx(src, "sm_90")
    assert rc == 0 and log == "", log
    assert "griddepcontrol" not in ptx


def _compile_only(target):
    try:
        return kvgen.Context.compile_only("cuda", target, cache_dir="")
    except (OSError, kvgen.KvgenError) as e:
        pytest.skip(f"no compile-only CUDA context (NVRTC): {e}")


def _write_tensors(lay, T=3, nb=4):
    rng = np.random.default_rng(5)
    key = rng.integers(0, 1 << 15, (T, lay.num_kv_heads, lay.head_size_k)
                       ).astype(np.uint16)
    value = rng.integers(0, 1 << 15, (T, lay.num_kv_heads, lay.head_size_v)
                         ).astype(np.uint16)
    kc = np.zeros(lay.extent_bytes("k", nb) // 2, np.uint16)
    vc = np.zeros(lay.extent_bytes("v", nb) // 2, np.uint16)
    slots = np.array([1, 20, 63][:T], np.int64)
    return key, value, kc, vc, slots, nb


def _stand_in_write_args(k):
    """Arguments of a MIMO reshape_and_cache kernel `k` of a compile-only
    context, which never dereferences device pointers (the runtime validates
    the struct, then stops): aligned stand-ins, 3 tokens, 4 blocks."""
    a = k.args_struct()
    for i, f in enumerate(("key", "value", "key_cache", "value_cache",
                           "slot_mapping")):
        setattr(a, f, (i + 1) << 20)
    a.num_tokens, a.num_blocks = 3, 4
    a.key_stride_token, a.key_stride_head = 4 * 192, 192
    a.value_stride_token, a.value_stride_head = 4 * 128, 128
    a.key_cache_bytes = MIMO.extent_bytes("k", 4)
    a.value_cache_bytes = MIMO.extent_bytes("v", 4)
    return a


def test_binding_follows_the_plan_on_compile_only_cuda():
    """sm_90 kernels (NVRTC-compiled by the runtime, warnings fatal) report
    and accept a programmatic dependent launch; sm_80 kernels and sm_90
    attention refuse it, naming why."""
    _need_generator()
    c90, c80 = _compile_only("sm_90"), _compile_only("sm_80")
    for op, layout, _flags, opts in OPS:
        lay = kvgen.Layout.parse(layout)
        k90 = c90.kernel(op, lay, **opts)
        k80 = c80.kernel(op, lay, **opts)
        assert k90.dependent_launch, op
        assert k90.launch_flags == _capi.LAUNCH_PROGRAMMATIC_DEPENDENT
        assert not k80.dependent_launch and k80.launch_flags == 0, op
    att = c90.kernel("paged_attention", MIMO, io_dtype="bf16",
                     num_q_heads=64)
    assert not att.dependent_launch
    w90 = c90.kernel("reshape_and_cache", MIMO, io_dtype="bf16")
    w80 = c80.kernel("reshape_and_cache", MIMO, io_dtype="bf16")
    args = {k.name: _stand_in_write_args(k) for k in (w90, w80)}
    # Accepted: the launch gets past the flag check to the compile-only one.
    with pytest.raises(kvgen.KvgenError) as e:
        w90.launch_raw(args[w90.name], 0, pdl=True)
    assert e.value.status == COMPILE_ONLY, e.value
    assert e.value.function == "kvgen_launch_ex (reshape_and_cache)"
    # Refused before anything else, by the binding and by the runtime.
    key, value, kc, vc, slots, nb = _write_tensors(MIMO)
    with pytest.raises(kvgen.KvgenError) as e:
        w80.reshape_and_cache(key, value, kc, vc, slots, num_blocks=nb,
                              pdl=True)
    assert e.value.status == INVALID_ARGUMENT
    assert "cannot take a programmatic dependent launch" in str(e.value)
    with pytest.raises(kvgen.KvgenError) as e:
        w80.launch_raw(args[w80.name], 0, pdl=True)
    assert e.value.status == INVALID_ARGUMENT
    assert "its plan has no dependent_launch" in e.value.message
    assert "(target sm_80)" in e.value.message
    # Without the flag both stop at the compile-only check.
    for k in (w90, w80):
        with pytest.raises(kvgen.KvgenError) as e:
            k.launch_raw(args[k.name], 0)
        assert e.value.status == COMPILE_ONLY
    c90.close()
    c80.close()


def _binaries_with(cache_dir, symbol):
    """How many disk cache entries hold `symbol` as an ELF string (NUL
    after it: a cubin's symbol or section name; sources never have one)."""
    needle = symbol.encode() + b"\0"
    return sum(needle in p.read_bytes()
               for p in Path(cache_dir).iterdir() if p.is_file())


def test_twin_is_compiled_on_the_first_pdl_launch(tmp_path):
    """A cold kernel compiles its plain entry only (one NVRTC compile, a
    cubin without NAME_pdl); its first programmatic dependent launch
    compiles the twin once, into a binary of its own; a new context on the
    same disk cache reads both."""
    _need_generator()
    cache = tmp_path / "cache"
    try:
        ctx = kvgen.Context.compile_only("cuda", "sm_90",
                                         cache_dir=str(cache))
    except (OSError, kvgen.KvgenError) as e:
        pytest.skip(f"no compile-only CUDA context (NVRTC): {e}")
    k = ctx.kernel("reshape_and_cache", MIMO, io_dtype="bf16")
    assert k.dependent_launch
    assert ctx.stats()["compiles"] == 1
    assert _binaries_with(cache, k.name) == 1
    assert _binaries_with(cache, k.name + "_pdl") == 0
    a = _stand_in_write_args(k)
    # A plain launch compiles nothing more.
    with pytest.raises(kvgen.KvgenError) as e:
        k.launch_raw(a, 0)
    assert e.value.status == COMPILE_ONLY
    assert ctx.stats()["compiles"] == 1
    for _ in range(2):
        with pytest.raises(kvgen.KvgenError) as e:
            k.launch_raw(a, 0, pdl=True)
        assert e.value.status == COMPILE_ONLY, e.value
        assert ctx.stats()["compiles"] == 2
    assert _binaries_with(cache, k.name + "_pdl") == 1
    assert _binaries_with(cache, k.name) == 1  # the plain binary only
    ctx.close()
    again = kvgen.Context.compile_only("cuda", "sm_90", cache_dir=str(cache))
    k2 = again.kernel("reshape_and_cache", MIMO, io_dtype="bf16")
    with pytest.raises(kvgen.KvgenError) as e:
        k2.launch_raw(a, 0, pdl=True)
    assert e.value.status == COMPILE_ONLY
    st = again.stats()
    assert st["compiles"] == 0 and st["disk_hits"] == 2, st
    again.close()


def test_host_backend_refuses_pdl_and_writes_nothing(kernel_cache):
    _need_generator()
    ctx = kvgen.Context("host", cache_dir=kernel_cache)
    k = ctx.kernel("reshape_and_cache", MIMO, io_dtype="bf16")
    assert not k.dependent_launch and k.launch_flags == 0
    key, value, kc, vc, slots, nb = _write_tensors(MIMO)
    with pytest.raises(kvgen.KvgenError) as e:
        k.reshape_and_cache(key, value, kc, vc, slots, num_blocks=nb,
                            pdl=True)
    assert e.value.status == INVALID_ARGUMENT
    with pytest.raises(kvgen.KvgenError):
        k.prepare(key, value, kc, vc, slots, num_blocks=nb, pdl=True)
    args, stream = k.prepare(key, value, kc, vc, slots, num_blocks=nb)
    with pytest.raises(kvgen.KvgenError) as e:
        k.launch_raw(args, stream, pdl=True)
    assert e.value.status == INVALID_ARGUMENT
    assert "'" + k.name + "' (target host) cannot take a programmatic " \
        "dependent launch" in e.value.message
    assert not kc.any() and not vc.any()
    # The same launch without the flag writes.
    k.launch_raw(args, stream)
    assert kc.any() and vc.any()
    ctx.close()
