"""Bit-exact tests for runtime/include/kvgen/Numerics.h.

The header is compiled into a small host shared library (shims/) and driven
through ctypes; results are compared bit for bit against ml_dtypes / numpy,
which serve as the independent reference. Further tests check that the
header compiles warning-free for the device targets (NVRTC sm_90, clang HIP
gfx942, clang CUDA sm_90) and, when a CUDA GPU is present, that the device
build produces exactly the same bits as the host build.

Run:  python3 -m pytest test/python/test_numerics.py -q
"""

import ctypes
import ctypes.util
import os
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
HEADER = REPO_ROOT / "runtime" / "include" / "kvgen" / "Numerics.h"
SHIM_DIR = Path(__file__).resolve().parent / "shims"
HOST_SHIM = SHIM_DIR / "numerics_host_shim.cpp"
APPLY_INC = SHIM_DIR / "numerics_apply.inc"

# Op codes of kvgen_numerics_apply (keep in sync with shims/numerics_apply.inc):
# name -> (op, input dtype, output dtype).
OPS = {
    "float_to_bf16": (0, np.float32, np.uint16),
    "bf16_to_float": (1, np.uint16, np.float32),
    "float_to_f16": (2, np.float32, np.uint16),
    "f16_to_float": (3, np.uint16, np.float32),
    "float_to_f8e4m3fn": (4, np.float32, np.uint8),
    "f8e4m3fn_to_float": (5, np.uint8, np.float32),
    "float_to_f8e4m3fnuz": (6, np.float32, np.uint8),
    "f8e4m3fnuz_to_float": (7, np.uint8, np.float32),
    "float_to_f8e5m2": (8, np.float32, np.uint8),
    "f8e5m2_to_float": (9, np.uint8, np.float32),
    "float_to_f8e5m2fnuz": (10, np.float32, np.uint8),
    "f8e5m2fnuz_to_float": (11, np.uint8, np.float32),
}

# fp8 format -> (ml_dtypes type, max finite, expected bits for +NaN, -NaN,
#                +inf, -inf, +0, -0).
F8 = {
    "e4m3fn": (ml_dtypes.float8_e4m3fn, 448.0, 0x7F, 0xFF, 0x7E, 0xFE, 0x00, 0x80),
    "e4m3fnuz": (ml_dtypes.float8_e4m3fnuz, 240.0, 0x80, 0x80, 0x7F, 0xFF, 0x00, 0x00),
    "e5m2": (ml_dtypes.float8_e5m2, 57344.0, 0x7E, 0xFE, 0x7B, 0xFB, 0x00, 0x80),
    "e5m2fnuz": (ml_dtypes.float8_e5m2fnuz, 57344.0, 0x80, 0x80, 0x7F, 0xFF, 0x00, 0x00),
}

SPECIAL_F32 = np.array(
    [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
     0x7F800001, 0xFF800001, 0x7FA12345, 0xFFFFFFFF, 0x00000001, 0x80000001,
     0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF],
    dtype=np.uint32).view(np.float32)


# ---------------------------------------------------------------------------
# Host shim
# ---------------------------------------------------------------------------

class Shim:
    def __init__(self, path):
        self.lib = ctypes.CDLL(str(path))
        self.fn = self.lib.kvgen_numerics_apply
        self.fn.argtypes = [ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_int64]
        self.fn.restype = None

    def __call__(self, name, values):
        op, in_t, out_t = OPS[name]
        src = np.ascontiguousarray(values, dtype=in_t)
        dst = np.zeros(src.size, dtype=out_t)
        self.fn(op, src.ctypes.data, dst.ctypes.data, src.size)
        return dst


def _build_shim(tmp_dir, embed):
    cxx = os.environ.get("CXX") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler (c++) found")
    out = Path(tmp_dir) / ("numerics_shim_embed.so" if embed else "numerics_shim.so")
    cmd = [cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-Werror", "-Wall",
           "-Wextra", "-Wconversion", "-Wsign-conversion", "-Wshadow",
           "-pedantic", "-I", str(REPO_ROOT), str(HOST_SHIM), "-o", str(out)]
    if embed:
        cmd.insert(1, "-DKVGEN_TEST_EMBED")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stderr.strip(), (
        "host shim build failed or warned:\n" + " ".join(cmd) + "\n" + proc.stderr)
    return out


@pytest.fixture(scope="session", params=["standalone", "embedded"])
def shim(request, tmp_path_factory):
    """The header built standalone (<cstdint>) and as embedded in a prelude."""
    tmp = tmp_path_factory.mktemp("numerics_" + request.param)
    return Shim(_build_shim(tmp, request.param == "embedded"))


# ---------------------------------------------------------------------------
# Input sets
# ---------------------------------------------------------------------------

def _f32_bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def _with_neighbours(x):
    """x together with the float32 values one ulp below and above it."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore"):
        up = np.nextafter(x, np.float32(np.inf))
        down = np.nextafter(x, np.float32(-np.inf))
    return np.concatenate([x, up, down])


def _signed(x):
    x = np.asarray(x, dtype=np.float32)
    return np.concatenate([x, -x])


def _grid_inputs(values, beyond):
    """Representable values, the midpoints between consecutive ones, and one
    float32 ulp either side of both; `values` are the non-negative finite
    values of the narrow format and `beyond` the next value its exponent
    pattern would have after the largest finite one."""
    grid = np.unique(np.concatenate([values.astype(np.float64), [beyond]]))
    mids = (grid[:-1] + grid[1:]) / 2  # exact: few significant bits
    assert np.all(mids.astype(np.float32) == mids)
    pts = np.concatenate([grid, mids, [2 * beyond, 1e4 * beyond]])
    with np.errstate(over="ignore"):  # bf16: 2 * beyond is inf in float32
        pts = pts.astype(np.float32)
    return _signed(_with_neighbours(pts))


def _finite_nonneg_values(dtype, nbits):
    codes = np.arange(1 << nbits, dtype=np.uint8 if nbits == 8 else np.uint16)
    vals = codes.view(dtype).astype(np.float32)
    vals = vals[np.isfinite(vals) & (vals >= 0)]
    return np.unique(vals)


def _beyond_max(vals):
    """Next step past the largest finite value (same spacing as just below)."""
    top = vals[-1].astype(np.float64)
    return top + (top - vals[-2].astype(np.float64))


@pytest.fixture(scope="session")
def random_f32():
    """~1M random floats: uniform bit patterns (all classes, incl. NaN and
    float32 subnormals) plus values spread over 2^-40 .. 2^40."""
    rng = np.random.default_rng(0x6B7667656E)
    n = 1 << 19
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    exps = rng.integers(127 - 40, 127 + 41, n).astype(np.uint32)
    mant = rng.integers(0, 1 << 23, n).astype(np.uint32)
    sign = rng.integers(0, 2, n).astype(np.uint32)
    spread = (sign << 31) | (exps << 23) | mant
    return np.concatenate([bits, spread]).view(np.float32)


def _f8_inputs(name):
    dtype, fmax = F8[name][0], F8[name][1]
    vals = _finite_nonneg_values(dtype, 8)
    assert vals[-1] == fmax
    pts = _grid_inputs(vals, _beyond_max(vals))
    # Dense sweep across the subnormal range and the first normal binade.
    min_normal = float(ml_dtypes.finfo(dtype).smallest_normal)
    sweep = np.linspace(0.0, 2.0 * min_normal, 4097, dtype=np.float32)
    # Far below the smallest subnormal, around the top, and beyond.
    extra = np.array([1e-30, 1e-10, float(np.finfo(np.float32).tiny),
                      fmax * 1.0001, fmax * 1.5, fmax * 2.0, 1e30,
                      float(np.finfo(np.float32).max)], dtype=np.float32)
    return np.concatenate([pts, _signed(sweep), _signed(extra), SPECIAL_F32])


def _f8_reference(name, x):
    """ml_dtypes of clip(x, -max, max): saturating RNE conversion."""
    dtype, fmax = F8[name][0], F8[name][1]
    with np.errstate(invalid="ignore"):
        return np.clip(x, -fmax, fmax).astype(dtype).view(np.uint8)


def _hex_list(a):
    a = np.asarray(a)
    if a.dtype == np.float32:
        a = a.view(np.uint32)
    return [hex(int(v)) for v in a]


def _assert_equal_bits(got, want, x, what):
    """got/want: integer bit patterns; x: the inputs (for the message)."""
    assert got.size == want.size == x.size and got.size > 0
    bad = np.nonzero(got != want)[0]
    if bad.size:
        i = bad[:8]
        pytest.fail(f"{what}: {bad.size}/{got.size} mismatches; inputs "
                    f"{_hex_list(x[i])} got {_hex_list(got[i])} "
                    f"want {_hex_list(want[i])}")


# ---------------------------------------------------------------------------
# fp8 encoders
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(F8))
def test_f8_encode_grid(shim, name):
    x = _f8_inputs(name)
    got = shim("float_to_f8" + name, x)
    _assert_equal_bits(got, _f8_reference(name, x), x, name + " grid")
    # Every encoding was hit, so the grid really covers the format.
    n_codes = len(np.unique(got))
    assert n_codes >= 250, n_codes


@pytest.mark.parametrize("name", list(F8))
def test_f8_encode_random(shim, random_f32, name):
    x = random_f32
    got = shim("float_to_f8" + name, x)
    _assert_equal_bits(got, _f8_reference(name, x), x, name + " random")
    assert x.size >= 1 << 20


@pytest.mark.parametrize("name", list(F8))
def test_f8_encode_specials(shim, name):
    _, fmax, nan_p, nan_n, inf_p, inf_n, zero_p, zero_n = F8[name]
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, fmax, -fmax,
                  1e30, -1e30, 1e-30, -1e-30], dtype=np.float32)
    got = shim("float_to_f8" + name, x).tolist()
    want = [nan_p, nan_n, inf_p, inf_n, zero_p, zero_n, inf_p, inf_n,
            inf_p, inf_n, zero_p, zero_n]
    assert got == want, [hex(v) for v in got]
    # The NaN code decodes to NaN; the saturated code is max finite.
    dtype = F8[name][0]
    codes = np.array([nan_p, nan_n, inf_p, inf_n], dtype=np.uint8).view(dtype)
    dec = codes.astype(np.float32)
    assert np.isnan(dec[0]) and np.isnan(dec[1])
    assert dec[2] == fmax and dec[3] == -fmax


# ---------------------------------------------------------------------------
# bf16 / f16 encoders (round to nearest even, overflow -> inf; no saturation)
# ---------------------------------------------------------------------------

def _half_like_inputs(dtype):
    vals = _finite_nonneg_values(dtype, 16)
    pts = _grid_inputs(vals, _beyond_max(vals))
    return np.concatenate([pts, SPECIAL_F32])


def _check_bf16(shim, x):
    got = shim("float_to_bf16", x)
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    # ml_dtypes turns every NaN into sign | 0x7fc0, which is exactly what the
    # header documents, so NaNs are compared bit-exactly as well.
    _assert_equal_bits(got, want, x, "bf16")


def _check_f16(shim, x):
    got = shim("float_to_f16", x)
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    nan = np.isnan(x)
    _assert_equal_bits(got[~nan], want[~nan], x[~nan], "f16")
    if nan.any():
        # numpy keeps payloads and may produce a signalling NaN; the header
        # always quiets: sign | 0x7e00 | (payload >> 13).
        xb = _f32_bits(x[nan])
        exp = (((xb >> 16) & 0x8000) | 0x7E00 | ((xb >> 13) & 0x3FF)).astype(np.uint16)
        _assert_equal_bits(got[nan], exp, x[nan], "f16 NaN")
        assert np.all(np.isnan(got[nan].view(np.float16)))
        assert np.all((got[nan] & 0x8000) == (want[nan] & 0x8000))


def test_bf16_encode_grid(shim):
    x = _half_like_inputs(ml_dtypes.bfloat16)
    _check_bf16(shim, x)
    assert x.size > 6 * 32000


def test_f16_encode_grid(shim):
    x = _half_like_inputs(np.float16)
    _check_f16(shim, x)
    assert x.size > 6 * 30000


def test_bf16_f16_encode_random(shim, random_f32):
    _check_bf16(shim, random_f32)
    _check_f16(shim, random_f32)
    assert np.isnan(random_f32).sum() > 0


def test_bf16_f16_encode_specials(shim):
    x = np.array([np.inf, -np.inf, 0.0, -0.0, 65520.0, -65520.0, 65519.996,
                  3.4e38, np.nan, -np.nan], dtype=np.float32)
    assert shim("float_to_f16", x).tolist() == [
        0x7C00, 0xFC00, 0x0000, 0x8000, 0x7C00, 0xFC00, 0x7BFF, 0x7C00,
        0x7E00, 0xFE00]
    assert shim("float_to_bf16", x).tolist() == [
        0x7F80, 0xFF80, 0x0000, 0x8000, 0x4780, 0xC780, 0x4780, 0x7F80,
        0x7FC0, 0xFFC0]


# ---------------------------------------------------------------------------
# Decoders: every bit pattern
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(F8))
def test_f8_decode_all(shim, name):
    dtype = F8[name][0]
    codes = np.arange(256, dtype=np.uint8)
    got = shim("f8" + name + "_to_float", codes)
    want = codes.view(dtype).astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    n_nan = int(np.isnan(want).sum())
    assert n_nan == {"e4m3fn": 2, "e4m3fnuz": 1, "e5m2": 6, "e5m2fnuz": 1}[name]
    # Bits agree everywhere, NaN included (quiet NaN, sign as ml_dtypes).
    _assert_equal_bits(got.view(np.uint32), want.view(np.uint32), codes, name)
    # Round trip through the encoder is the identity on every non-NaN code
    # (except e5m2 inf, which the saturating encoder maps to max finite).
    enc = shim("float_to_f8" + name, got)
    keep = ~np.isnan(got) & np.isfinite(got)
    assert np.array_equal(enc[keep], codes[keep]) and keep.sum() >= 248


def test_bf16_decode_all(shim):
    codes = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = shim("bf16_to_float", codes)
    want = codes.view(ml_dtypes.bfloat16).astype(np.float32)
    _assert_equal_bits(got.view(np.uint32), want.view(np.uint32), codes, "bf16 dec")
    assert np.isnan(got).sum() == 2 * 127


def test_f16_decode_all(shim):
    codes = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = shim("f16_to_float", codes)
    want = codes.view(np.float16).astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got).sum() == 2 * 1023
    _assert_equal_bits(got.view(np.uint32), want.view(np.uint32), codes, "f16 dec")
    # Round trip through the encoder is the identity on non-NaN codes.
    keep = ~np.isnan(got)
    assert np.array_equal(shim("float_to_f16", got)[keep], codes[keep])


# ---------------------------------------------------------------------------
# Device compilation
# ---------------------------------------------------------------------------

_EMBED_TYPES = """\
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef long long int64_t;
#define KVGEN_DEVICE_EMBED 1
"""

_NVRTC_PRELUDE = _EMBED_TYPES + """\
#define KVGEN_HD __device__
#define KVGEN_TEST_ENTRY extern "C" __global__
#define KVGEN_TEST_TID ((int64_t)blockIdx.x * blockDim.x + threadIdx.x)
#define KVGEN_TEST_NTHREADS ((int64_t)gridDim.x * blockDim.x)
"""

_CLANG_PRELUDE = _EMBED_TYPES + """\
#define KVGEN_HD __attribute__((device))
#define KVGEN_TEST_ENTRY extern "C" __attribute__((global))
#define KVGEN_TEST_TID 0
#define KVGEN_TEST_NTHREADS 1
"""


def _device_source(prelude):
    """The header pasted verbatim between a prelude and the test kernel."""
    return prelude + HEADER.read_text() + "\n" + APPLY_INC.read_text()


def _load_nvrtc():
    candidates = []
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                 "/usr/local/cuda"):
        if root:
            candidates += [Path(root) / "lib64" / "libnvrtc.so",
                           *sorted((Path(root) / "lib64").glob("libnvrtc.so.*"))]
    found = ctypes.util.find_library("nvrtc")
    if found:
        candidates.append(found)
    for c in candidates:
        try:
            lib = ctypes.CDLL(str(c))
        except OSError:
            continue
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        return lib
    return None


def _nvrtc_compile(source, options):
    """Returns (result code, log, PTX text, CUBIN bytes or None)."""
    lib = _load_nvrtc()
    if lib is None:
        pytest.skip("libnvrtc not found (looked in $CUDA_HOME, $CUDA_PATH, "
                    "/usr/local/cuda/lib64 and the loader path)")
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(),
                                b"kvgen_numerics.cu", 0, None, None)
    assert rc == 0, lib.nvrtcGetErrorString(rc)
    try:
        opts = [o.encode() for o in options]
        arr = (ctypes.c_char_p * len(opts))(*opts)
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        ptx = cubin = None
        if rc == 0:
            lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
            buf = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetPTX(prog, buf)
            ptx = buf.value.decode()
            if lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)) == 0 and size.value:
                buf = ctypes.create_string_buffer(size.value)
                lib.nvrtcGetCUBIN(prog, buf)
                cubin = buf.raw
        return rc, log.value.decode(errors="replace"), ptx, cubin
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


@pytest.mark.parametrize("extra", [[], ["--use_fast_math"]], ids=["default", "fast_math"])
def test_nvrtc_compiles_without_warnings(extra):
    opts = ["-std=c++17", "--gpu-architecture=sm_90"] + extra
    rc, log, ptx, _ = _nvrtc_compile(_device_source(_NVRTC_PRELUDE), opts)
    assert rc == 0, log
    assert log.strip() == "", "NVRTC diagnostics (treated as failure):\n" + log
    assert ".entry kvgen_numerics_apply" in ptx


def _clang():
    clang = shutil.which("clang-22")
    if clang is None:
        pytest.skip("clang-22 not found on PATH")
    return clang


_CLANG_TARGETS = {
    "hip_gfx942": ["-x", "hip", "--cuda-device-only", "-nogpulib", "-nogpuinc",
                   "--offload-arch=gfx942"],
    # -Wno-unknown-cuda-version: clang-22 knows CUDA <= 12.9 and warns about
    # the toolkit installed on this machine; that driver diagnostic concerns
    # the environment, not the code being compiled (-nocudainc/-nocudalib
    # mean nothing from the toolkit is used anyway, but a detected toolkit
    # still sets the PTX version, so it is given: 7.8, sm_90's minimum).
    "cuda_sm90": ["-x", "cuda", "--cuda-device-only", "-nocudainc", "-nocudalib",
                  "-Wno-unknown-cuda-version", "--cuda-feature=+ptx78",
                  "--cuda-gpu-arch=sm_90"],
}


@pytest.mark.parametrize("target", list(_CLANG_TARGETS))
def test_clang_device_compiles_without_warnings(tmp_path, target):
    clang = _clang()
    src = tmp_path / "numerics_device.cpp"
    src.write_text(_device_source(_CLANG_PRELUDE))
    out = tmp_path / "numerics_device.s"
    # -nostdinc proves the embedded header needs no headers at all.
    cmd = [clang, *_CLANG_TARGETS[target], "-nostdinc", "-std=c++17", "-O2",
           "-S", "-Werror", "-Wall", "-Wextra", "-Wconversion",
           "-Wsign-conversion", "-Wshadow", "-pedantic", str(src), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    diag = proc.stdout + proc.stderr
    assert proc.returncode == 0, " ".join(cmd) + "\n" + diag
    assert diag.strip() == "", "diagnostics (treated as failure):\n" + diag
    assert "kvgen_numerics_apply" in out.read_text()


# ---------------------------------------------------------------------------
# Optional: run the NVRTC build on a CUDA GPU, compare with the host build
# ---------------------------------------------------------------------------

class _Cuda:
    """Just enough of the CUDA driver API through ctypes."""

    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError:
            pytest.skip("libcuda.so.1 not loadable: no CUDA driver")
        if self.lib.cuInit(0) != 0:
            pytest.skip("cuInit failed: no usable CUDA device")
        count = ctypes.c_int()
        if self.lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
            pytest.skip("no CUDA device")
        self.dev = ctypes.c_int()
        self._ok(self.lib.cuDeviceGet(ctypes.byref(self.dev), 0))
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._ok(self.lib.cuDeviceGetAttribute(ctypes.byref(major), 75, self.dev))
        self._ok(self.lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, self.dev))
        self.arch = f"sm_{major.value}{minor.value}"
        self.ctx = ctypes.c_void_p()
        self._ok(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), self.dev))
        self._ok(self.lib.cuCtxSetCurrent(self.ctx))
        self.lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        self.lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
        self.lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        self.lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]

    def _ok(self, rc):
        assert rc == 0, f"CUDA driver error {rc}"

    def load(self, image):
        mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
        self._ok(self.lib.cuModuleLoadData(ctypes.byref(mod), image))
        self._ok(self.lib.cuModuleGetFunction(ctypes.byref(fn), mod,
                                              b"kvgen_numerics_apply"))
        return mod, fn

    def apply(self, fn, name, values):
        op, in_t, out_t = OPS[name]
        src = np.ascontiguousarray(values, dtype=in_t)
        dst = np.zeros(src.size, dtype=out_t)
        d_in, d_out = ctypes.c_uint64(), ctypes.c_uint64()
        self._ok(self.lib.cuMemAlloc_v2(ctypes.byref(d_in), max(src.nbytes, 1)))
        self._ok(self.lib.cuMemAlloc_v2(ctypes.byref(d_out), max(dst.nbytes, 1)))
        try:
            self._ok(self.lib.cuMemcpyHtoD_v2(d_in.value, src.ctypes.data, src.nbytes))
            a_op, a_n = ctypes.c_int32(op), ctypes.c_int64(src.size)
            a_in, a_out = ctypes.c_void_p(d_in.value), ctypes.c_void_p(d_out.value)
            params = (ctypes.c_void_p * 4)(
                *[ctypes.cast(ctypes.byref(a), ctypes.c_void_p)
                  for a in (a_op, a_in, a_out, a_n)])
            self._ok(self.lib.cuLaunchKernel(fn, 1024, 1, 1, 256, 1, 1, 0, None,
                                             params, None))
            self._ok(self.lib.cuCtxSynchronize())
            self._ok(self.lib.cuMemcpyDtoH_v2(dst.ctypes.data, d_out.value, dst.nbytes))
        finally:
            self.lib.cuMemFree_v2(d_in.value)
            self.lib.cuMemFree_v2(d_out.value)
        return dst


@pytest.mark.parametrize("extra", [[], ["--use_fast_math"]], ids=["default", "fast_math"])
def test_gpu_matches_host(shim, random_f32, extra):
    cuda = _Cuda()
    rc, log, _, cubin = _nvrtc_compile(
        _device_source(_NVRTC_PRELUDE),
        ["-std=c++17", f"--gpu-architecture={cuda.arch}"] + extra)
    assert rc == 0 and log.strip() == "", log
    assert cubin, "NVRTC produced no CUBIN"
    mod, fn = cuda.load(cubin)
    try:
        floats = np.concatenate(
            [random_f32, *(_f8_inputs(n) for n in F8),
             _half_like_inputs(np.float16), _half_like_inputs(ml_dtypes.bfloat16)])
        inputs = {np.float32: floats,
                  np.uint16: np.arange(1 << 16, dtype=np.uint32).astype(np.uint16),
                  np.uint8: np.arange(256, dtype=np.uint8)}
        compared = 0
        for name, (_, in_t, out_t) in OPS.items():
            x = inputs[in_t]
            got = cuda.apply(fn, name, x)
            want = shim(name, x)
            if out_t == np.float32:
                got, want = got.view(np.uint32), want.view(np.uint32)
            _assert_equal_bits(got, want, x, "GPU " + name)
            compared += got.size
        assert compared > 4 * 1_000_000
    finally:
        cuda.lib.cuModuleUnload(mod)
