"""Swapping kvgen in at an engine's reshape_and_cache_flash call site.

A toy engine layer (EngineLayer below) writes each step's K/V into its paged
cache through one call site, `self.cache_write(...)`, with the argument
list engines use for flash-attention caches:

    cache_write(key, value, key_cache, value_cache, slot_mapping,
                kv_cache_dtype, k_scale, v_scale)

"before" is a small torch implementation of that op written here
(reference_reshape_and_cache_flash); "after" is torch.ops.kvgen.
reshape_and_cache_flash. The same steps run through both and the caches
must be bit-identical, for three cache arrangements an engine may allocate:
NHD, HND (a permuted view) and K|V halves of one packed tensor, with
MiMo-V2-Flash's different K and V head sizes (192 / 128), and for an fp8
cache with per-tensor scales.

    python examples/engine_swap.py [--device cuda]
"""

import argparse

import torch

import kvgen.torch  # noqa: F401  registers torch.ops.kvgen.*


def reference_reshape_and_cache_flash(key, value, key_cache, value_cache,
                                      slot_mapping, kv_cache_dtype, k_scale,
                                      v_scale):
    """before: cache[slot // block_size, slot % block_size] = row for every
    slot >= 0; fp8 caches store saturate(row / scale) as e4m3 bits."""
    block_size = key_cache.shape[1]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    blocks, offsets = slots // block_size, slots % block_size
    for rows, cache, scale in ((key, key_cache, k_scale),
                               (value, value_cache, v_scale)):
        rows = rows[keep]
        if kv_cache_dtype != "auto":
            top = torch.finfo(torch.float8_e4m3fn).max
            rows = (rows.float() / scale).clamp(-top, top).to(
                torch.float8_e4m3fn).view(torch.uint8)
        cache[blocks, offsets] = rows


class EngineLayer:
    """The KV-cache write of one attention layer, as an engine has it."""

    def __init__(self, cache_write, key_cache, value_cache, kv_cache_dtype):
        self.cache_write = cache_write  # the call site kvgen is swapped into
        self.key_cache, self.value_cache = key_cache, value_cache
        self.kv_cache_dtype = kv_cache_dtype
        dev = key_cache.device
        self.k_scale = torch.tensor([0.04], device=dev)
        self.v_scale = torch.tensor([0.03], device=dev)

    def step(self, key, value, slot_mapping):
        self.cache_write(key, value, self.key_cache, self.value_cache,
                         slot_mapping, self.kv_cache_dtype, self.k_scale,
                         self.v_scale)


def make_caches(arrangement, nb, bs, heads, dk, dv, dtype, dev):
    if arrangement == "nhd":
        return (torch.zeros(nb, bs, heads, dk, dtype=dtype, device=dev),
                torch.zeros(nb, bs, heads, dv, dtype=dtype, device=dev))
    if arrangement == "hnd":
        return tuple(torch.zeros(nb, heads, bs, d, dtype=dtype,
                                 device=dev).permute(0, 2, 1, 3)
                     for d in (dk, dv))
    kv = torch.zeros(nb, bs, heads, dk + dv, dtype=dtype, device=dev)
    return kv[..., :dk], kv[..., dk:]


def run(cache_write, arrangement, kv_cache_dtype, steps, dev):
    heads, dk, dv, bs, nb = 4, 192, 128, 16, 64
    dtype = torch.uint8 if kv_cache_dtype == "fp8" else torch.bfloat16
    layer = EngineLayer(cache_write,
                        *make_caches(arrangement, nb, bs, heads, dk, dv,
                                     dtype, dev), kv_cache_dtype)
    for key, value, slots in steps:
        layer.step(key, value, slots)
    return layer.key_cache, layer.value_cache


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    dev = torch.device(ap.parse_args().device)
    gen = torch.Generator().manual_seed(0)
    # A prefill of 200 tokens, then decode steps of 8 sequences.
    steps, used = [], torch.randperm(64 * 16, generator=gen)
    at = 0
    for n in (200, 8, 8, 8):
        key = torch.randn(n, 4, 192, generator=gen).to(torch.bfloat16)
        value = torch.randn(n, 4, 128, generator=gen).to(torch.bfloat16)
        slots = used[at:at + n].clone()
        slots[n // 2] = -1  # a padded token
        at += n
        steps.append((key.to(dev), value.to(dev), slots.to(dev)))
    failed = 0
    for arrangement in ("nhd", "hnd", "packed"):
        for kv_cache_dtype in ("auto", "fp8"):
            before = run(reference_reshape_and_cache_flash, arrangement,
                         kv_cache_dtype, steps, dev)
            after = run(torch.ops.kvgen.reshape_and_cache_flash, arrangement,
                        kv_cache_dtype, steps, dev)
            same = all(torch.equal(b.contiguous().view(torch.uint8),
                                   a.contiguous().view(torch.uint8))
                       for b, a in zip(before, after))
            failed += not same
            print(f"{arrangement:6s} {kv_cache_dtype:4s}: before == after: "
                  f"{'yes' if same else 'NO'}")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
