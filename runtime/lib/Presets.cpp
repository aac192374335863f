//===- Presets.cpp - Named layouts of public models -----------------------===//
#include "kvgen/Presets.h"
#include "Alternatives.h"

namespace kvgen {
namespace {
LayoutDesc make(int64_t heads, int64_t hk, int64_t hv, int64_t block,
                DType dtype = DType::BF16, ScaleKind scale = ScaleKind::None,
                Packing packing = Packing::Separate, Order order = Order::NHD) {
  return LayoutDesc::kv(heads, hk, hv, block, dtype, scale, packing, order);
}
/// A DeepSeek-style MLA latent cache: components kv_c and k_pe packed in one
/// row of one kv head.
LayoutDesc mla(int64_t dc, int64_t dpe, int64_t block,
               DType dtype = DType::BF16, ScaleKind scale = ScaleKind::None) {
  LayoutDesc l;
  l.numKvHeads = 1;
  l.blockSize = block;
  l.packing = Packing::Packed;
  l.dtype = dtype;
  l.scale = scale;
  l.components = {{"kv_c", dc, std::nullopt}, {"k_pe", dpe, std::nullopt}};
  return l;
}
} // namespace

const std::vector<Preset> &presets() {
  static const std::vector<Preset> all = {
      {"mimo-v2-flash", "MiMo-V2-Flash full attention: 4 KV heads, K 192 / V 128, "
                        "block 16, bf16",
       make(4, 192, 128, 16)},
      {"mimo-v2-flash-b64", "MiMo-V2-Flash, block 64, bf16",
       make(4, 192, 128, 64)},
      {"mimo-v2-flash-fp8", "MiMo-V2-Flash, block 16, f8E4M3FN, per-tensor scales",
       make(4, 192, 128, 16, DType::F8E4M3FN, ScaleKind::PerTensor)},
      {"mimo-v2-flash-packed", "MiMo-V2-Flash as unified attention stores it: "
                               "packed 320-wide K|V rows, block 16, bf16",
       make(4, 192, 128, 16, DType::BF16, ScaleKind::None, Packing::Packed)},
      {"mimo-v2-flash-swa", "MiMo-V2-Flash sliding-window layers: 8 KV heads, "
                            "192 / 128, block 16, bf16",
       make(8, 192, 128, 16)},
      {"llama3-8b", "Llama-3.1-8B: 8 KV heads, 128 / 128, block 16, bf16",
       make(8, 128, 128, 16)},
      {"gpt-oss-120b", "GPT-OSS-120B: 8 KV heads, 64 / 64, block 16, bf16",
       make(8, 64, 64, 16)},
      {"deepseek-v3-mla", "DeepSeek-V3 MLA latent row: components kv_c 512 + "
                          "k_pe 64, packed (576 wide), 1 head, block 64, bf16",
       mla(512, 64, 64)},
      {"deepseek-v3-mla-fp8", "DeepSeek-V3 MLA latent row as above, "
                              "f8E4M3FN with one per-tensor scale",
       mla(512, 64, 64, DType::F8E4M3FN, ScaleKind::PerTensor)},
  };
  return all;
}

std::optional<LayoutDesc> findPreset(const std::string &name) {
  for (const Preset &p : presets())
    if (name == p.name)
      return p.layout;
  return std::nullopt;
}

std::string knownPresetNames() { return joinAlternatives(presets()); }

} // namespace kvgen
