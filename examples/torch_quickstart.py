"""kvgen from PyTorch in a minute: write tokens into a paged KV cache,
gather them back, verify.

    pip install .            # from the repository (builds the runtime and
                             # the code generator into the kvgen package)
    python examples/torch_quickstart.py            # CPU (kvgen's host backend)
    python examples/torch_quickstart.py --device cuda

MiMo-V2-Flash geometry: 4 KV heads with K head size 192 and V head size 128
(different!), block size 16. The caches are plain torch tensors; kvgen
derives the layout from their shapes, dtypes and strides, JIT-generates and
compiles a kernel for it on first use (cached on disk, ~/.cache/kvgen or
$KVGEN_CACHE_DIR) and launches it on torch's current stream.
"""

import argparse
import time

import torch

import kvgen.torch  # noqa: F401  registers torch.ops.kvgen.*


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--fp8", action="store_true",
                    help="an fp8 (e4m3) cache with per-tensor scales")
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device here "
                 "(run with --device cpu, the default)")

    num_tokens, heads, head_k, head_v = 300, 4, 192, 128
    block_size, num_blocks = 16, 32
    key = torch.randn(num_tokens, heads, head_k, dtype=torch.bfloat16,
                      device=dev)
    value = torch.randn(num_tokens, heads, head_v, dtype=torch.bfloat16,
                        device=dev)
    cache_dtype = torch.uint8 if args.fp8 else torch.bfloat16
    # NHD caches [num_blocks, block_size, heads, head_size]; an HND cache
    # would be torch.empty(num_blocks, heads, block_size, D).permute(0, 2, 1,
    # 3), one packed tensor kv[..., :192] / kv[..., 192:], ... (docs/torch.md)
    key_cache = torch.zeros(num_blocks, block_size, heads, head_k,
                            dtype=cache_dtype, device=dev)
    value_cache = torch.zeros(num_blocks, block_size, heads, head_v,
                              dtype=cache_dtype, device=dev)
    # Where each token goes: slot = block * block_size + offset; -1 = skip.
    slot_mapping = torch.randperm(num_blocks * block_size,
                                  device=dev)[:num_tokens]
    slot_mapping[::10] = -1
    k_scale = torch.tensor([0.05], device=dev)
    v_scale = torch.tensor([0.05], device=dev)
    kv_cache_dtype = "fp8" if args.fp8 else "auto"

    t0 = time.perf_counter()
    torch.ops.kvgen.reshape_and_cache_flash(key, value, key_cache,
                                            value_cache, slot_mapping,
                                            kv_cache_dtype, k_scale, v_scale)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    print(f"write: first call {1e3 * (time.perf_counter() - t0):.0f} ms "
          "(generate + compile, or the disk cache)")

    key_out = torch.zeros_like(key)
    value_out = torch.zeros_like(value)
    torch.ops.kvgen.gather_cache(key_cache, value_cache, slot_mapping,
                                 key_out, value_out, kv_cache_dtype, k_scale,
                                 v_scale)
    if dev.type == "cuda":
        torch.cuda.synchronize()

    written = slot_mapping >= 0
    if args.fp8:
        # e4m3 keeps ~2 significant digits: compare against the rounding.
        def expect(x, s):
            m = torch.finfo(torch.float8_e4m3fn).max
            q = (x.float() / s).clamp(-m, m).to(torch.float8_e4m3fn)
            return (q.float() * s).to(torch.bfloat16)
        ok_k = torch.equal(key_out[written], expect(key[written], 0.05))
        ok_v = torch.equal(value_out[written], expect(value[written], 0.05))
    else:
        ok_k = torch.equal(key_out[written], key[written])
        ok_v = torch.equal(value_out[written], value[written])
    # Every V row landed in V's cache with V's width (128), not K's (192).
    s = slot_mapping[written]
    ok_cache = args.fp8 or torch.equal(
        value_cache.view(-1, heads, head_v)[s], value[written])
    print(f"gather: K {'ok' if ok_k else 'MISMATCH'}, V "
          f"{'ok' if ok_v else 'MISMATCH'}"
          + ("" if args.fp8 else
             f", V cache rows {'ok' if ok_cache else 'MISMATCH'}"))
    print(f"tokens written: {int(written.sum())} of {num_tokens}, "
          f"device {dev}, kernel table entries: {kvgen.torch.plan_count()}")
    if not (ok_k and ok_v and ok_cache):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
