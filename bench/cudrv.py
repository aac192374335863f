"""Minimal ctypes access to the CUDA driver and NVRTC, for the benchmark's
baselines: an empty kernel, and a raw cuLaunchKernel of the same kvgen
kernel (compiled here from the bundle source with the runtime's NVRTC
options) to compare the C API's launch overhead against; and the
programmatic dependent launches (cuLaunchKernelEx with
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) of the chained decode
benchmark's producer and consumer kernels (bench/bench_pdl.py).

Uses the current (torch's primary) context of the calling thread.
"""

import ctypes
import glob
import os

_vp = ctypes.c_void_p

# cuda.h: CUlaunchAttributeValue is a 64-byte union (8-byte aligned),
# CUlaunchAttribute its 4-byte id, 4 bytes of padding and the value,
# CUlaunchConfig grid, block, shared memory, stream and the attribute list.
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


class CUlaunchAttributeValue(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64),
                ("programmaticStreamSerializationAllowed", ctypes.c_int),
                ("_align", ctypes.c_void_p)]


class CUlaunchAttribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4),
                ("value", CUlaunchAttributeValue)]


class CUlaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
                ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint),
                ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", _vp),
                ("attrs", ctypes.POINTER(CUlaunchAttribute)),
                ("numAttrs", ctypes.c_uint)]


assert ctypes.sizeof(CUlaunchAttribute) == 72
assert ctypes.sizeof(CUlaunchConfig) == 56


def _load(names, what):
    errs = []
    for n in names:
        try:
            return ctypes.CDLL(n)
        except OSError as e:
            errs.append(f"{n}: {e}")
    raise OSError(f"cannot load {what}: " + "; ".join(errs))


class Driver:
    def __init__(self, device=0):
        self.cu = _load(["libcuda.so.1", "libcuda.so"], "libcuda")
        names = ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"]
        for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                     "/usr/local/cuda"):
            if home:
                names += sorted(glob.glob(f"{home}/lib64/libnvrtc.so*"))
        self.nv = _load(names, "libnvrtc")
        cu, nv = self.cu, self.nv
        cu.cuGetErrorString.argtypes = [ctypes.c_int,
                                        ctypes.POINTER(ctypes.c_char_p)]
        cu.cuCtxGetCurrent.argtypes = [ctypes.POINTER(_vp)]
        cu.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        cu.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(_vp),
                                                ctypes.c_int]
        cu.cuCtxSetCurrent.argtypes = [_vp]
        cu.cuModuleLoadData.argtypes = [ctypes.POINTER(_vp), ctypes.c_char_p]
        cu.cuModuleGetFunction.argtypes = [ctypes.POINTER(_vp), _vp,
                                           ctypes.c_char_p]
        cu.cuLaunchKernel.argtypes = [_vp] + [ctypes.c_uint] * 7 + \
            [_vp, _vp, _vp]
        cu.cuLaunchKernel.restype = ctypes.c_int
        self.launch_ex = getattr(cu, "cuLaunchKernelEx", None)
        if self.launch_ex is not None:
            self.launch_ex.argtypes = [ctypes.POINTER(CUlaunchConfig), _vp,
                                       _vp, _vp]
            self.launch_ex.restype = ctypes.c_int
        nv.nvrtcCreateProgram.argtypes = [ctypes.POINTER(_vp),
                                          ctypes.c_char_p, ctypes.c_char_p,
                                          ctypes.c_int, _vp, _vp]
        nv.nvrtcCompileProgram.argtypes = [_vp, ctypes.c_int,
                                           ctypes.POINTER(ctypes.c_char_p)]
        nv.nvrtcGetProgramLogSize.argtypes = [_vp,
                                              ctypes.POINTER(ctypes.c_size_t)]
        nv.nvrtcGetProgramLog.argtypes = [_vp, ctypes.c_char_p]
        nv.nvrtcGetCUBINSize.argtypes = [_vp, ctypes.POINTER(ctypes.c_size_t)]
        nv.nvrtcGetCUBIN.argtypes = [_vp, ctypes.c_char_p]
        nv.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(_vp)]
        ctx = _vp()
        self._ck(cu.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:
            dev = ctypes.c_int()
            self._ck(cu.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
            self._ck(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev),
                     "cuDevicePrimaryCtxRetain")
            self._ck(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self.modules = []

    def _ck(self, r, what):
        if r != 0:
            s = ctypes.c_char_p()
            self.cu.cuGetErrorString(r, ctypes.byref(s))
            raise RuntimeError(f"{what} failed: {r} "
                               f"({(s.value or b'?').decode()})")

    def compile(self, source, name, arch="sm_90", options=("-std=c++17",)):
        """cubin bytes of `source` (NVRTC, --gpu-architecture=arch)."""
        nv = self.nv
        prog = _vp()
        r = nv.nvrtcCreateProgram(ctypes.byref(prog), source.encode(),
                                  (name + ".cu").encode(), 0, None, None)
        if r:
            raise RuntimeError(f"nvrtcCreateProgram failed: {r}")
        opts = [f"--gpu-architecture={arch}".encode()] + \
            [o.encode() for o in options]
        argv = (ctypes.c_char_p * len(opts))(*opts)
        r = nv.nvrtcCompileProgram(prog, len(opts), argv)
        if r:
            n = ctypes.c_size_t()
            nv.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
            log = ctypes.create_string_buffer(n.value)
            nv.nvrtcGetProgramLog(prog, log)
            nv.nvrtcDestroyProgram(ctypes.byref(prog))
            raise RuntimeError(f"NVRTC failed ({r}) for {name}:\n"
                               f"{log.value.decode(errors='replace')}")
        n = ctypes.c_size_t()
        nv.nvrtcGetCUBINSize(prog, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        nv.nvrtcGetCUBIN(prog, buf)
        nv.nvrtcDestroyProgram(ctypes.byref(prog))
        return buf.raw

    def function(self, cubin, name):
        """CUfunction `name` of a cubin, loaded into the current context."""
        mod = _vp()
        self._ck(self.cu.cuModuleLoadData(ctypes.byref(mod), cubin),
                 "cuModuleLoadData")
        self.modules.append(mod)
        fn = _vp()
        self._ck(self.cu.cuModuleGetFunction(ctypes.byref(fn), mod,
                                             name.encode()),
                 f"cuModuleGetFunction({name})")
        return fn

    def launcher(self, fn, grid, block, stream, params=None):
        """A zero-argument callable doing one cuLaunchKernel with fixed
        arguments (params: a ctypes array of void* or None), returning the
        CUresult."""
        launch = self.cu.cuLaunchKernel
        s = _vp(stream)
        p = None if params is None else ctypes.cast(params, _vp)
        g, b = int(grid), int(block)

        def go():
            return launch(fn, g, 1, 1, b, 1, 1, 0, s, p, None)
        return go

    def launcher_pdl(self, fn, grid, block, stream, params=None):
        """As launcher(), through cuLaunchKernelEx with programmatic stream
        serialization allowed: the kernel may start before the previous
        kernel on the stream completes (it must wait for it with
        griddepcontrol.wait)."""
        if self.launch_ex is None:
            raise RuntimeError("the CUDA driver lacks cuLaunchKernelEx")
        attr = CUlaunchAttribute()
        attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        cfg = CUlaunchConfig(int(grid), 1, 1, int(block), 1, 1, 0,
                             _vp(stream), ctypes.pointer(attr), 1)
        launch = self.launch_ex
        p = None if params is None else ctypes.cast(params, _vp)
        keep = (attr, cfg)  # alive as long as the closure

        def go():
            return launch(ctypes.byref(keep[1]), fn, p, None)
        return go


EMPTY_SOURCE = 'extern "C" __global__ void kvgen_bench_empty() {}\n'
