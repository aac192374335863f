//===- attention.h - Attention: the op entry --------------------*- C++ -*-===//
//
// Last of the attention family's pieces: the op's entry template
// (paged_attention), which picks the decode body (attention_decode.h) or
// the prefill body (attention_prefill.h) by the plan.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_PRELUDE_ATTENTION_H
#define KVGEN_PRELUDE_ATTENTION_H

namespace kvgen {

/// The CTA body of plan P: attentionCta (16 rows per CTA) or, with
/// prefill tiles, attentionTileCta; each with its own shared memory. The
/// one-element body (ALIGNED false) is instantiated only for plans whose
/// cache alignment is not proven: NVRTC would otherwise compile it before
/// dropping it (same PTX, less JIT time; docs/performance.md).
template <class L, class P, class O, bool TILED> struct AttnEntry {
  static KVGEN_DEVICE inline void run(const kvgen_paged_attention_args &a,
                                      const SideMap &kMap,
                                      const SideMap &vMap, bool aligned) {
    typedef AttnShape<L, P, O> S;
    static_assert(int64_t(sizeof(AttnSmem<S>)) ==
                      attnDecodeSmemBytes(S::WARPS, S::HV, S::MAX_SPLITS),
                  "kvgen/Launch.h attnDecodeSmemBytes is AttnSmem's size");
    KVGEN_SHARED AttnSmem<S> sm;
    if (aligned)
      attentionCta<L, P, O, true>(a, kMap, vMap, sm);
    else if constexpr (!P::cache_proven)
      attentionCta<L, P, O, false>(a, kMap, vMap, sm);
  }
};
template <class L, class P, class O> struct AttnEntry<L, P, O, true> {
  static KVGEN_DEVICE inline void run(const kvgen_paged_attention_args &a,
                                      const SideMap &kMap,
                                      const SideMap &vMap, bool aligned) {
    AttnTileSmem<AttnShape<L, P, O> > &sm =
        AttnTileStorage<AttnShape<L, P, O> >::get();
    if (aligned)
      attentionTileCta<L, P, O, true>(a, kMap, vMap, sm);
    else if constexpr (!P::cache_proven)
      attentionTileCta<L, P, O, false>(a, kMap, vMap, sm);
  }
};

/// kv.paged_attention over layout L with plan P and options O. A CTA whose
/// cache rows are not all VEC-aligned (only with '?' strides or unaligned
/// bases) loads one element per access.
template <class L, class P, class O>
KVGEN_DEVICE inline void paged_attention(const kvgen_paged_attention_args &a) {
  // The sides' maps as two objects: one PagedKV holding both, passed on to
  // attentionCta (by reference or by value), changed its code (compare_ptx:
  // block1_mha_checked); the accessor is built over them for the entry's
  // alignment check, attentionCta uses its static members.
  const SideMap kMap = kMapOf<L>(a), vMap = vMapOf<L>(a);
  const PagedKV<L, kvgen_paged_attention_args> kv = {kMap, vMap};
  const bool aligned = P::cache_proven || kv.template aligned<P::vec>(a);
  AttnEntry<L, P, O, AttnShape<L, P, O>::TILED>::run(a, kMap, vMap, aligned);
}

} // namespace kvgen

#endif // KVGEN_PRELUDE_ATTENTION_H
