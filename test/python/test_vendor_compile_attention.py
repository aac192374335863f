"""The emitted kv.paged_attention kernels compile in-process with the
vendors' compilers, with no GPU: NVRTC to an sm_90 cubin (the tensor-core
path: mma.sync, hardware fp8 converts) and Debian's comgr to a gfx90a code
object (the emulated-MMA path), through the runtime's compile-only
contexts. Any compiler warning fails a compile (the runtime treats it as an
error). Skips, with the reason, where libnvrtc or libamd_comgr cannot be
loaded. The geometries are the reference models' (docs/attention.md) plus
odd head sizes, dynamic strides and every option."""

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

# (layout, num_q_heads, extra flags)
SPECS = [
    # MiMo-V2-Flash full attention (64 / 4, 192 / 128), bf16 and fp8.
    (kvgen.Layout(4, 192, 128, 16), 64, []),
    (kvgen.Layout(4, 192, 128, 64, dtype="f8E4M3FN", scale="per_head"), 64,
     []),
    # MiMo sliding window (64 / 8, sinks), HND, e5m2 per tensor.
    (kvgen.Layout(8, 192, 128, 16, order="hnd", dtype="f8E5M2"), 64,
     ["--sinks"]),
    # Llama-3-8B (32 / 8, 128 / 128), packed, soft-cap.
    (kvgen.Layout(8, 128, 128, 16, packing="packed"), 32,
     ["--logits_soft_cap"]),
    # gpt-oss (64 / 8, 64 / 64, sinks), f16 queries.
    (kvgen.Layout(8, 64, 64, 16, dtype="f16"), 64,
     ["--sinks", "--io", "f16"]),
    # Odd head sizes, a 24-token block, dynamic strides, checked (the
    # default), fnuz.
    (kvgen.Layout(2, 80, 48, 24, k_strides=(None, None, None),
                  v_strides=(None, None, None)), 4, []),
    (kvgen.Layout(1, 64, 96, 1, dtype="f8E4M3FNUZ"), 16, []),
    # The lse option: MiMo bf16; with sinks, soft-cap and fp8 scales.
    (kvgen.Layout(4, 192, 128, 16), 64, ["--lse"]),
    (kvgen.Layout(8, 192, 128, 16, order="hnd", dtype="f8E5M2"), 64,
     ["--sinks", "--logits_soft_cap", "--lse"]),
    # The prefill plan (K/V tiles in shared memory, cp.async on NVIDIA):
    # MiMo bf16, fp8 with sinks + window options, packed soft-cap with lse,
    # odd sizes with dynamic strides, V wider than K in f32, V of 3 n-tiles.
    (kvgen.Layout(4, 192, 128, 16), 64, ["--prefill"]),
    (kvgen.Layout(8, 192, 128, 16, order="hnd", dtype="f8E5M2"), 64,
     ["--sinks", "--prefill"]),
    (kvgen.Layout(8, 128, 128, 16, packing="packed"), 32,
     ["--logits_soft_cap", "--lse", "--prefill"]),
    (kvgen.Layout(2, 80, 48, 24, k_strides=(None, None, None),
                  v_strides=(None, None, None)), 4, ["--prefill"]),
    (kvgen.Layout(1, 64, 96, 1, dtype="f32"), 16, ["--prefill"]),
    # V of an odd number of 8-column n-tiles (24: the decode path's P V
    # step; attnWideStep, which needs pairs, must not be instantiated).
    (kvgen.Layout(2, 40, 24, 16), 4, ["--prefill"]),
    # Chunked layouts (docs/layout.md): vLLM's legacy MiMo K [nb, H, D/8,
    # bs, 8] / V [nb, H, D, bs] (bf16), ROCm aiter's fp8 K [nb, H, D/16,
    # bs, 16] / shuffled V [nb, H, bs/16, D, 16]; decode and prefill.
    *[(kvgen.Layout.parse(text), 64, flags) for flags in ([], ["--prefill"])
      for text in (
          "num_kv_heads = 4, head_size_k = 192, head_size_v = 128, "
          "block_size = 16, dtype = bf16, k_strides = [12288, 8, 3072], "
          "k_elem_chunks = [8, 128], v_strides = [8192, 1, 2048], "
          "v_elem_stride = 16",
          "num_kv_heads = 4, head_size_k = 128, head_size_v = 128, "
          "block_size = 16, dtype = f8E4M3FN, scale = per_head, "
          "k_strides = [8192, 16, 2048], k_elem_chunks = [16, 256], "
          "v_strides = [8192, 1, 2048], v_token_chunks = [16, 2048], "
          "v_elem_stride = 16")],
    # V elements 2^18 apart: a prefill tile's copies of one V row are
    # farther apart than the immediate offsets of its copies reach
    # (stageCopies computes those addresses).
    (kvgen.Layout.parse(
        "num_kv_heads = 1, head_size_k = 64, head_size_v = 64, "
        "block_size = 16, dtype = bf16, k_strides = [1024, 64, 64], "
        "v_strides = [16515088, 1, 1], v_elem_stride = 262144"), 2,
     ["--prefill"]),
]


def emit_bundle(directory, target):
    for i, (layout, q_heads, extra) in enumerate(SPECS):
        f = directory / f"layout{i}.mlir"
        f.write_text(f"#kv.layout<{layout.text}>\n")
        cmd = [str(KVGEN), "emit", "--layout", str(f), "--op",
               "paged_attention", "--num_q_heads", str(q_heads),
               "--target", target, "--bundle", str(directory / "bundle")]
        r = subprocess.run(cmd + extra, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    names = [line.split("=", 1)[1].strip()
             for line in (directory / "bundle" / "kvgen-manifest.txt")
             .read_text().splitlines() if line.startswith("name")]
    assert len(names) == len(SPECS)
    return directory / "bundle", names


def compile_all(ctx, bundle, names, backend):
    """Loads `bundle` into the compile-only context and compiles each of
    `names` (any compiler warning is an error); skips where the backend's
    compiler cannot be loaded."""
    ctx.load_bundle(bundle)
    for name in names:
        try:
            k = ctx.kernel_by_name(name)
        except kvgen.KvgenError as e:
            if e.status_name == "KVGEN_ERROR_BACKEND_UNAVAILABLE":
                pytest.skip(f"{backend} compiler not loadable here: {e}")
            raise
        assert k.op == "paged_attention"


@pytest.mark.parametrize("backend,target", [("cuda", "sm_90"),
                                            ("cuda", "sm_80"),
                                            ("hip", "gfx90a")])
def test_attention_kernels_compile(tmp_path, backend, target):
    if not KVGEN.is_file():
        pytest.skip(f"{KVGEN} not built")
    try:
        ctx = kvgen.Context.compile_only(backend, target,
                                         cache_dir=str(tmp_path / "cache"))
    except (OSError, kvgen.KvgenError) as e:
        pytest.skip(f"{backend} compiler not loadable here: {e}")
    bundle, names = emit_bundle(tmp_path, target)
    # MiMo's prefill tiles (K 192 / V 128 bf16: 448 + 272 bytes a token,
    # padded rows) in dynamic shared memory: 64 tokens x 2 stages = 92160
    # bytes on sm_80, 4 stages of unpadded rows (384 + 256 bytes: 163840,
    # then 4 x 16 bytes of tile barriers: sm_90's default for MiMo, the
    # warp-specialized wgmma loop) on sm_90, reduced to 32 x 2 = 46080
    # within gfx90a's 64 KiB of LDS.
    entries = (bundle / "kvgen-manifest.txt").read_text().split("[kernel]")
    mimo = [e for e in entries
            if "name = kvgen_paged_attention_h4_k192_v128_b16_nhd_sep_bf16_"
               "io_bf16_num_q_heads64_prefill\n" in e]
    assert len(mimo) == 1, entries
    expected = {"gfx90a": 46080, "sm_90": 163904}.get(target, 92160)
    assert f"dynamic_smem_bytes = {expected}\n" in mimo[0], mimo[0]
    # Decode plans have none.
    assert all("dynamic_smem_bytes" not in e for e in entries
               if "_prefill\n" not in e), entries
    compile_all(ctx, bundle, names, backend)


#: Prefill kernels planned with wgmma=1 (kv-plan; sm_90's default where
#: they fit): MiMo bf16 with sinks, Llama packed with soft-cap and lse, f16 with
#: V wider than K (V = 256, wgmma's largest), a block of 8 tokens.
WGMMA_SPECS = [
    (kvgen.Layout(4, 192, 128, 16), 64, ["--sinks", "--prefill"]),
    (kvgen.Layout(8, 128, 128, 16, packing="packed"), 32,
     ["--logits_soft_cap", "--lse", "--prefill"]),
    (kvgen.Layout(2, 64, 256, 8, dtype="f16"), 8,
     ["--io", "f16", "--prefill"]),
]


@pytest.mark.parametrize("threads", [128, 256])
def test_wgmma_prefill_kernels_compile_for_sm_90a(tmp_path, threads):
    """The prefill body on warpgroup MMA (attnWgmmaStep: wgmma.mma_async,
    fences, descriptors) compiles warning-free with NVRTC for sm_90, which
    the runtime compiles as sm_90a; the emitted plans say wgmma."""
    if not KVGEN.is_file():
        pytest.skip(f"{KVGEN} not built")
    try:
        ctx = kvgen.Context.compile_only("cuda", "sm_90",
                                         cache_dir=str(tmp_path / "cache"))
    except (OSError, kvgen.KvgenError) as e:
        pytest.skip(f"cuda compiler not loadable here: {e}")
    env = dict(os.environ, KVGEN_PLAN_OPTIONS=f"wgmma=1 threads={threads}")
    for i, (layout, q_heads, extra) in enumerate(WGMMA_SPECS):
        f = tmp_path / f"layout{i}.mlir"
        f.write_text(f"#kv.layout<{layout.text}>\n")
        r = subprocess.run([str(KVGEN), "emit", "--layout", str(f), "--op",
                            "paged_attention", "--num_q_heads", str(q_heads),
                            "--target", "sm_90", "--bundle",
                            str(tmp_path / "bundle")] + extra,
                           capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
    bundle = tmp_path / "bundle"
    sources = sorted(bundle.glob("*.cu"))
    assert len(sources) == len(WGMMA_SPECS)
    for s in sources:
        assert "static constexpr bool wgmma = true;" in s.read_text(), s
    names = [line.split("=", 1)[1].strip()
             for line in (bundle / "kvgen-manifest.txt").read_text()
             .splitlines() if line.startswith("name")]
    assert len(names) == len(WGMMA_SPECS)
    compile_all(ctx, bundle, names, "cuda")


def _cubin_log(source, arch):
    """NVRTC's log of compiling `source` to an `arch` cubin (ptxas runs
    inside NVRTC, so its info lines are in the log); None without NVRTC.
    Without --split-compile: with it ptxas's performance notes (C7508,
    C7512, C7514, ...) go to the process's stderr, not to the log."""
    import ctypes
    sys.path.insert(0, str(REPO / "scripts"))
    import compare_ptx
    try:
        lib = compare_ptx.Nvrtc().lib
    except RuntimeError:
        return None
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(),
                                  b"k.cu", 0, None, None) == 0
    opts = [f"--gpu-architecture={arch}", "-std=c++17",
            "--ptxas-options=-v"]
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, buf)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    log = buf.value.decode(errors="replace")
    assert rc == 0, log
    return log


def test_cubin_log_holds_ptxas_performance_notes():
    """_cubin_log's log holds ptxas's 'Potential Performance Loss' notes,
    which the tests below look for: a setmaxnreg without launch bounds
    that fix the registers at entry is ignored (C7508). With NVRTC's
    --split-compile=0 the notes went to stderr and the log had none."""
    source = """
extern "C" __global__ void __launch_bounds__(384) k(int *p) {
  if (threadIdx.x >= 256) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  p[threadIdx.x] = 1;
}
"""
    log = _cubin_log(source, "sm_90a")
    if log is None:
        pytest.skip("libnvrtc not loadable here")
    assert "C7508" in log, log


@pytest.mark.parametrize("options", [
    "wgmma=1 threads=128 tile-stages=3", "wgmma=1 threads=256 tile-stages=3",
    "wgmma=1 threads=384 producer-warps=4"])
def test_pipelined_wgmma_prefill_stays_asynchronous(tmp_path, options):
    """wgmma with tile-stages >= 3 takes the pipelined loop (Q K^T of tile
    k and P V of tile k - 1 in flight together, the softmax while P V
    runs). ptxas keeps the products asynchronous only if no instruction
    reads their accumulators before the matching wait: its sm_90a log must
    name no serialized wgmma (C7514, 'Potential Performance Loss') and no
    warpgroup wait or arrive it injected (C7517 / C7519). A branch on the
    tile index inside the loop (the first version) caused all three.
    With producer warps (warp specialization) also no ignored setmaxnreg
    (C7508: the launch bounds must fix the registers at entry; without
    min_ctas_per_sm = 1 the computing warps kept 168 registers, spilled
    and serialized their products, C7512) and no spill."""
    if not KVGEN.is_file():
        pytest.skip(f"{KVGEN} not built")
    env = dict(os.environ, KVGEN_PLAN_OPTIONS=options)
    for i, (layout, q_heads, extra) in enumerate(WGMMA_SPECS):
        f = tmp_path / f"layout{i}.mlir"
        f.write_text(f"#kv.layout<{layout.text}>\n")
        out = tmp_path / f"k{i}.cu"
        r = subprocess.run([str(KVGEN), "emit", "--layout", str(f), "--op",
                            "paged_attention", "--num_q_heads", str(q_heads),
                            "--target", "sm_90", "-o", str(out)] + extra,
                           capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        source = out.read_text()
        # (warp specialization: 4 stages where they fit, every spec here)
        stages = 4 if "producer-warps" in options else 3
        assert f"tile_stages = {stages}," in source and \
            "static constexpr bool wgmma = true;" in source
        log = _cubin_log(source, "sm_90a")
        if log is None:
            pytest.skip("libnvrtc not loadable here")
        for code in ("C7508", "C7512", "C7514", "C7517", "C7519",
                     "warning"):
            assert code not in log, f"spec {i}: {log}"
        assert " 0 bytes spill stores, 0 bytes spill loads" in log, log


@pytest.mark.parametrize("threads", [384, 512, 1024])
def test_producer_warps_registers_fit_the_cta(tmp_path, threads):
    """Warp specialization's setmaxnreg: the producer warpgroup lowers its
    registers per thread (dec), the computing warps raise theirs (inc),
    and setmaxnreg.inc waits until the CTA's pool (ptxas's registers at
    entry x threads) holds what it asks for, so the two must fit that pool:
    the computing warps' 232 did only at 384 threads (at 512, 3 x 128 x
    232 + 128 x 40 = 94208 registers of a 65536 pool: the computing warps
    would never start on an H100)."""
    if not KVGEN.is_file():
        pytest.skip(f"{KVGEN} not built")
    import re
    sys.path.insert(0, str(REPO / "scripts"))
    import compare_ptx
    try:
        nvrtc = compare_ptx.Nvrtc()
    except RuntimeError:
        pytest.skip("libnvrtc not loadable here")
    f = tmp_path / "layout.mlir"
    f.write_text(f"#kv.layout<{kvgen.Layout(4, 192, 128, 16).text}>\n")
    env = dict(os.environ, KVGEN_PLAN_OPTIONS=f"wgmma=1 threads={threads} "
               "producer-warps=4")
    r = subprocess.run([str(KVGEN), "emit", "--layout", str(f), "--op",
                        "paged_attention", "--num_q_heads", "64", "--target",
                        "sm_90", "--prefill", "-o", str(tmp_path / "k.cu")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    ptx, log, _ = nvrtc.compile((tmp_path / "k.cu").read_text(), "k.cu",
                                ["--gpu-architecture=sm_90a", "-std=c++17",
                                 "--ptxas-options=-v"])
    dec = [int(n) for n in re.findall(
        r"setmaxnreg\.dec\.sync\.aligned\.u32\s+(\d+)", ptx)]
    inc = [int(n) for n in re.findall(
        r"setmaxnreg\.inc\.sync\.aligned\.u32\s+(\d+)", ptx)]
    entry = [int(n) for n in re.findall(r"Used (\d+) registers", log)]
    assert len(dec) == len(inc) == len(entry) == 1, (dec, inc, log)
    assert "C7508" not in log, log  # setmaxnreg applied
    assert dec[0] <= entry[0] <= inc[0], (dec, inc, entry)
    pool = entry[0] * threads
    assert 128 * dec[0] + (threads - 128) * inc[0] <= pool, \
        (threads, dec, inc, entry)


@pytest.mark.parametrize("args,plan", [
    (["--op", "paged_attention", "--num_q_heads", "8"],
     "cache_alignment = proven"),
    (["--op", "paged_attention", "--num_q_heads", "8", "--prefill"],
     "cache_alignment = proven"),
    (["--op", "copy_blocks"], "bulk_copy = true"),
    (["--op", "swap_blocks"], "bulk_copy = true"),
])
def test_plans_instantiate_only_the_body_they_run(tmp_path, args, plan):
    """A plan with proven cache alignment never runs the one-element
    attention body, and one with bulk_copy never runs the element-wise
    block copy; NVRTC compiles an instantiated body before it drops it as
    dead (3-7% of the JIT time, the PTX the same: docs/performance.md), so
    attention.h's AttnEntry and blocks.h's copyBlocks instantiate neither.
    attentionCta, attentionTileCta and copyBlocksVec static_assert it: the
    MiMo preset's sm_90 kernels (proven, bulk copies) compile."""
    if not KVGEN.is_file():
        pytest.skip(f"{KVGEN} not built")
    out = tmp_path / "k.cu"
    r = subprocess.run([str(KVGEN), "emit", "--preset", "mimo-v2-flash",
                        "--target", "sm_90", "-o", str(out)] + args,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    source = out.read_text()
    assert plan in source
    if _cubin_log(source, "sm_90a") is None:
        pytest.skip("libnvrtc not loadable here")
