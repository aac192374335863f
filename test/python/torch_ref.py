"""A torch reference of the ops of kvgen.torch, written from their
definitions with plain torch indexing (no kvgen code): what the GPU tests
compare kvgen's CUDA kernels with. On the CPU, test_torch_ops.py checks it
against the numpy reference (kvgen_ref.py) first.

Caches are [num_blocks, block_size, H, D] views (any strides), or vLLM's
legacy pair (write_legacy, gather_legacy); fp8 caches are uint8 or float8
tensors.
"""

import torch

FP8 = {"fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn,
       "fp8_e5m2": torch.float8_e5m2}
#: kv_cache_dtype names of an unquantized cache (vLLM's CacheDType)
UNQUANTIZED = ("auto", "bfloat16", "float16")


def _fp8_type(cache, kv_cache_dtype):
    if cache.dtype in (torch.uint8, torch.int8):
        return FP8[kv_cache_dtype]
    return cache.dtype


def _scale(s, heads):
    # [1] or [H] -> broadcastable over [n, H, D]
    return s.float().reshape(-1, 1).expand(heads, 1) if s.numel() == heads \
        else s.float().reshape(1, 1)


def write(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype,
          k_scale, v_scale):
    """reshape_and_cache_flash: cache[slot // bs, slot % bs] = row for
    the first T = slot_mapping.numel() rows (quantized as saturate(x /
    scale) for fp8)."""
    bs = key_cache.shape[1]
    T = slot_mapping.numel()
    ok = slot_mapping >= 0
    s = slot_mapping[ok].long()
    for rows, cache, scale in ((key, key_cache, k_scale),
                               (value, value_cache, v_scale)):
        r = _stored(rows[:T][ok], cache, kv_cache_dtype, scale)
        cache[s // bs, s % bs] = r


def _stored(r, cache, kv_cache_dtype, scale):
    """Rows [n, H, D] as a cache stores them: unconverted, or
    saturate(x / scale) in the cache's fp8 type (viewed as its dtype)."""
    if kv_cache_dtype in UNQUANTIZED:
        return r
    t = _fp8_type(cache, kv_cache_dtype)
    m = torch.finfo(t).max
    q = (r.float() / _scale(scale, r.shape[1])).clamp(-m, m).to(t)
    return q.view(cache.dtype) if cache.dtype != t else q


def gather(key_cache, value_cache, slot_mapping, key_out, value_out,
           kv_cache_dtype, k_scale, v_scale):
    """gather_cache: out[t] = cache[slot_mapping[t]] (q * scale for fp8,
    converted to out's dtype); rows of negative slots untouched."""
    bs = key_cache.shape[1]
    ok = slot_mapping >= 0
    s = slot_mapping[ok].long()
    for out, cache, scale in ((key_out, key_cache, k_scale),
                              (value_out, value_cache, v_scale)):
        c = cache[s // bs, s % bs]
        if kv_cache_dtype not in UNQUANTIZED:
            t = _fp8_type(cache, kv_cache_dtype)
            c = (c.view(t).float() * _scale(scale, c.shape[1]))
        out[ok] = c.to(out.dtype)


def copy_blocks(key_caches, value_caches, block_mapping):
    for kc, vc in zip(key_caches, value_caches):
        for c in (kc, vc):
            c[block_mapping[:, 1]] = c[block_mapping[:, 0]].clone()


def swap_blocks(src, dst, block_mapping):
    m = block_mapping.to(src.device)
    dst[m[:, 1].to(dst.device)] = src[m[:, 0]].to(dst.device)


def concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype,
                         scale):
    L = kv_c.shape[1]
    T = slot_mapping.numel()
    kv_c, k_pe = kv_c[:T], k_pe[:T]
    write(kv_c.unsqueeze(1), k_pe.unsqueeze(1),
          kv_cache[..., :L].unsqueeze(2), kv_cache[..., L:].unsqueeze(2),
          slot_mapping, kv_cache_dtype, scale, scale)


def gather_and_maybe_dequant_cache_batch(src_cache, dst, block_table, cu_seq_lens,
                                   batch_size, kv_cache_dtype, scale,
                                   seq_starts=None):
    bs = src_cache.shape[1]
    for b in range(batch_size):
        lo, hi = int(cu_seq_lens[b]), int(cu_seq_lens[b + 1])
        start = int(seq_starts[b]) if seq_starts is not None else 0
        for i in range(hi - lo):
            p = start + i
            row = src_cache[int(block_table[b, p // bs]), p % bs]
            dst[lo + i] = _dequant(row, kv_cache_dtype, scale, dst.dtype)


def _dequant(row, kv_cache_dtype, scale, dtype):
    if kv_cache_dtype not in UNQUANTIZED:
        t = FP8[kv_cache_dtype]
        row = row.view(t).float() * scale.float()
    return row.to(dtype)


def gather_and_maybe_dequant_cache(src_cache, dst, block_table, cu_seq_lens,
                                   token_to_seq, num_tokens, kv_cache_dtype,
                                   scale, seq_starts=None):
    """vLLM's current form: dst row t < num_tokens of sequence b =
    token_to_seq[t], position p = t - cu_seq_lens[b] + seq_starts[b];
    rows with t >= cu_seq_lens[b + 1] untouched."""
    bs = src_cache.shape[1]
    for t in range(num_tokens):
        b = int(token_to_seq[t])
        lo, hi = int(cu_seq_lens[b]), int(cu_seq_lens[b + 1])
        if t >= hi:
            continue
        p = t - lo + (int(seq_starts[b]) if seq_starts is not None else 0)
        row = src_cache[int(block_table[b, p // bs]), p % bs]
        dst[t] = _dequant(row, kv_cache_dtype, scale, dst.dtype)


def cp_gather_cache(src_cache, dst, block_table, cu_seq_lens, batch_size,
                    seq_starts=None):
    """The batch form as a raw copy (src_cache and dst of one dtype)."""
    gather_and_maybe_dequant_cache_batch(src_cache, dst, block_table,
                                         cu_seq_lens, batch_size, "auto",
                                         None, seq_starts)


def convert_fp8(dst_cache, src_cache, scale, kv_cache_dtype):
    """Float -> fp8: saturate(x / scale); fp8 -> float: q * scale (fp8
    caches uint8 or float8)."""
    t = FP8[kv_cache_dtype]
    if src_cache.dtype in (torch.bfloat16, torch.float16, torch.float32):
        m = torch.finfo(t).max
        q = (src_cache.float() / scale).clamp(-m, m).to(t)
        dst_cache.copy_(q.view(dst_cache.dtype) if dst_cache.dtype != t
                        else q)
    else:
        dst_cache.copy_((src_cache.view(t).float() * scale)
                        .to(dst_cache.dtype))


def swap_blocks_bytes(src, dst, block_size_in_bytes, block_mapping):
    """vLLM's swap_blocks: for each (s, d), block_size_in_bytes bytes at
    byte s * block_size_in_bytes of src's memory to d * ... of dst's
    (through their storages: padding between blocks included)."""
    def raw(t):
        u = torch.empty(0, dtype=torch.uint8, device=t.device)
        return u.set_(t.untyped_storage(),
                      t.storage_offset() * t.element_size(),
                      (t.untyped_storage().nbytes()
                       - t.storage_offset() * t.element_size(),))
    rs, rd = raw(src), raw(dst)
    n = block_size_in_bytes
    for s, d in block_mapping.tolist():
        rd[d * n:(d + 1) * n] = rs[s * n:(s + 1) * n].to(rd.device)


def write_legacy(key, value, key_cache, value_cache, slot_mapping,
                 kv_cache_dtype, k_scale, v_scale):
    """reshape_and_cache on vLLM's legacy caches, key_cache [nb, H, D/x,
    bs, x], value_cache [nb, H, D, bs]: element d of a key row goes to
    key_cache[b, h, d // x, o, d % x], of a value row to value_cache[b, h,
    d, o], for slot = b * bs + o >= 0 of the first T =
    slot_mapping.numel() rows."""
    bs, x = key_cache.shape[3], key_cache.shape[4]
    T = slot_mapping.numel()
    ok = slot_mapping >= 0
    s = slot_mapping[ok].long()
    b, o = s // bs, s % bs
    k = _stored(key[:T][ok], key_cache, kv_cache_dtype, k_scale)
    v = _stored(value[:T][ok], value_cache, kv_cache_dtype, v_scale)
    n, H, D = k.shape
    # Advanced indices around slices: the indexed result is [n, H, D/x, x]
    # (key) and [n, H, D] (value). fp8 through uint8 views (index_put of
    # float8 dtypes is not on every device).
    _raw(key_cache)[b, :, :, o, :] = _raw(k).reshape(n, H, D // x, x)
    _raw(value_cache)[b, :, :, o] = _raw(v)


def _raw(t):
    """1-byte (fp8) tensors as uint8, others as they are."""
    return t.view(torch.uint8) if t.element_size() == 1 else t


def gather_legacy(key_cache, value_cache, slot_mapping, key_out, value_out,
                  kv_cache_dtype, k_scale, v_scale):
    """gather_cache from legacy caches (write_legacy's inverse, as
    gather)."""
    bs = key_cache.shape[3]
    ok = slot_mapping >= 0
    s = slot_mapping[ok].long()
    b, o = s // bs, s % bs
    k = _raw(key_cache)[b, :, :, o, :]
    rows = ((k.reshape(k.shape[0], k.shape[1], -1), key_out, key_cache,
             k_scale), (_raw(value_cache)[b, :, :, o], value_out,
                        value_cache, v_scale))
    for c, out, cache, scale in rows:
        if kv_cache_dtype not in UNQUANTIZED:
            t = _fp8_type(cache, kv_cache_dtype)
            c = c.view(t).float() * _scale(scale, c.shape[1])
        out[ok] = c.to(out.dtype)


def concat_and_cache_ds_mla(kv_c, k_pe, kv_cache, slot_mapping):
    """vLLM's concat_and_cache_mla with kv_cache_dtype "fp8_ds_mla"
    (csrc/libtorch_stable/cache_kernels.cu, concat_and_cache_ds_mla_kernel),
    in torch: for each t < T with slot s = slot_mapping[t] >= 0, entry
    (s // bs, s % bs) of the [nb, bs, 656] byte cache gets
      bytes [0, 512):   e4m3fn(kv_c[t, e] / scale_i), tile i = e // 128,
                        saturating, round to nearest even, every NaN
                        (a NaN value, inf / inf) 0x7f whatever its sign
                        (__nv_cvt_float_to_fp8's canonical NaN);
      bytes [512, 528): scale_i = max(amax_i / 448, FLT_MIN) as float32,
                        amax_i = the largest |kv_c[t, e]| of tile i (NaN
                        passed over, as fmaxf does), in float32;
      bytes [528, 656): k_pe[t] as it is (its 16-bit values' bytes).
    The scale argument is not read (vLLM's kernel reads none)."""
    bs = kv_cache.shape[1]
    T = slot_mapping.numel()
    cache = kv_cache.view(torch.uint8)
    tiny = torch.finfo(torch.float32).tiny
    for t in range(T):
        s = int(slot_mapping[t])
        if s < 0:
            continue
        x = kv_c[t].float().reshape(4, 128)
        a = x.abs()
        a = torch.where(torch.isnan(a), torch.zeros_like(a), a)
        scale = torch.clamp_min(a.amax(dim=1) / 448.0, tiny)
        y = x / scale[:, None]
        q = y.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
        q = torch.where(torch.isnan(y), torch.full_like(q, 0x7f), q)
        row = cache[s // bs, s % bs]
        row[:512] = q.reshape(512)
        row[512:528] = scale.view(torch.uint8)
        row[528:656] = k_pe[t].contiguous().view(torch.uint8)


def cp_gather_and_upconvert_fp8_kv_cache(src_cache, dst, block_table,
                                         workspace_starts, batch_size,
                                         seq_starts=None):
    """vLLM's reader of "fp8_ds_mla" caches (cache_kernels.cu,
    cp_gather_and_upconvert_fp8_kv_cache with map_gather_page_task), in
    torch: request b < batch_size owns dst rows [min(ws[b], N),
    min(ws[b + 1], N)) (the last one up to N = dst.shape[0]; an end below
    its start: no row); row ws[b] + i reads position p = i + seq_starts[b]
    of b, entry (block_table[b, p // bs], p % bs) of the [nb, bs, 656]
    byte cache:
      dst[row, e] = bf16(float(e4m3fn byte e) * scale_(e // 128)) for e <
                    512 (a float32 product rounded to nearest even),
                    scale_i the float32 at bytes 512 + 4 i;
      dst[row, 512:576] = the bf16 values at bytes [528, 656), their bits.
    Other rows untouched."""
    bs = src_cache.shape[1]
    N = dst.shape[0]
    cache = src_cache.view(torch.uint8)
    for b in range(batch_size):
        lo = min(int(workspace_starts[b]), N)
        hi = min(int(workspace_starts[b + 1]) if b + 1 < batch_size else N,
                 N)
        start = int(seq_starts[b]) if seq_starts is not None else 0
        for i in range(max(hi - lo, 0)):
            p = start + i
            row = cache[int(block_table[b, p // bs]), p % bs]
            q = row[:512].view(torch.float8_e4m3fn).float().reshape(4, 128)
            scale = row[512:528].clone().view(torch.float32)
            dst[lo + i, :512] = (q * scale[:, None]).reshape(512).to(
                torch.bfloat16)
            dst[lo + i, 512:] = row[528:656].clone().view(torch.bfloat16)
