//===- LayoutParseTest.cpp - parseLayout <-> toString(LayoutDesc) ---------===//
#include "TestKernels.h"
#include "kvgen/Layout.h"

#include <gtest/gtest.h>

using namespace kvgen;

namespace {

void expectSame(const LayoutDesc &a, const LayoutDesc &b) {
  EXPECT_EQ(a.numKvHeads, b.numKvHeads);
  EXPECT_EQ(a.components[kKey].headSize, b.components[kKey].headSize);
  EXPECT_EQ(a.components[kValue].headSize, b.components[kValue].headSize);
  EXPECT_EQ(a.blockSize, b.blockSize);
  EXPECT_EQ(a.order, b.order);
  EXPECT_EQ(a.packing, b.packing);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.scale, b.scale);
  ASSERT_EQ(a.components[kKey].strides.has_value(), b.components[kKey].strides.has_value());
  if (a.components[kKey].strides)
    EXPECT_TRUE(*a.components[kKey].strides == *b.components[kKey].strides);
  ASSERT_EQ(a.components[kValue].strides.has_value(), b.components[kValue].strides.has_value());
  if (a.components[kValue].strides)
    EXPECT_TRUE(*a.components[kValue].strides == *b.components[kValue].strides);
}

std::vector<LayoutDesc> sampleLayouts() {
  std::vector<LayoutDesc> out;
  out.push_back(test::mimoLayout(16));
  LayoutDesc packed = test::mimoLayout(64);
  packed.packing = Packing::Packed;
  packed.order = Order::HND;
  packed.dtype = DType::F16;
  out.push_back(packed);
  LayoutDesc fp8 = test::mimoLayout(16);
  fp8.dtype = DType::F8E4M3FNUZ;
  fp8.scale = ScaleKind::PerHead;
  out.push_back(fp8);
  LayoutDesc dyn = test::mimoLayout(16);
  dyn.components[kKey].strides = Strides{kDynamic, 768, 192};
  dyn.components[kValue].strides = Strides{kDynamic, kDynamic, kDynamic};
  out.push_back(dyn);
  LayoutDesc mla = LayoutDesc::kv(1, 576, 512, 1, DType::F32);
  mla.components[kKey].strides = Strides{1 << 20, 576, 0};
  out.push_back(mla);
  return out;
}

TEST(ParseLayout, RoundTripsToString) {
  for (const LayoutDesc &l : sampleLayouts()) {
    std::string text = toString(l);
    std::string err;
    std::optional<LayoutDesc> parsed = parseLayout(text, &err);
    ASSERT_TRUE(parsed.has_value()) << text << ": " << err;
    expectSame(l, *parsed);
    EXPECT_EQ(toString(*parsed), text);
  }
}

TEST(ParseLayout, ParsesTheDocumentedMiMoText) {
  std::string err;
  std::optional<LayoutDesc> l = parseLayout(
      "num_kv_heads = 4, head_size_k = 192, head_size_v = 128, block_size = "
      "16, order = nhd, packing = separate, dtype = bf16, scale = none, "
      "k_strides = [?, 768, 192], v_strides = [8192, 512, 128]",
      &err);
  ASSERT_TRUE(l) << err;
  EXPECT_EQ(l->numKvHeads, 4);
  EXPECT_EQ(l->components[kKey].headSize, 192);
  EXPECT_EQ(l->components[kValue].headSize, 128);
  EXPECT_EQ(l->blockSize, 16);
  ASSERT_TRUE(l->components[kKey].strides);
  EXPECT_EQ(l->components[kKey].strides->block, kDynamic);
  EXPECT_EQ(l->components[kKey].strides->token, 768);
  EXPECT_EQ(l->components[kKey].strides->head, 192);
  ASSERT_TRUE(l->components[kValue].strides);
  EXPECT_EQ(l->components[kValue].strides->block, 8192);
  EXPECT_FALSE(l->validate().has_value());
}

TEST(ParseLayout, AcceptsFieldsInAnyOrder) {
  std::string err;
  std::optional<LayoutDesc> l =
      parseLayout("scale=none,dtype=f16 , packing = packed, order = hnd, "
                  "block_size = 8, head_size_v = 64, head_size_k = 80, "
                  "num_kv_heads = 2",
                  &err);
  ASSERT_TRUE(l) << err;
  EXPECT_EQ(l->components[kKey].headSize, 80);
  EXPECT_EQ(l->components[kValue].headSize, 64);
  EXPECT_EQ(l->packing, Packing::Packed);
  EXPECT_EQ(l->order, Order::HND);
  EXPECT_EQ(l->dtype, DType::F16);
  EXPECT_FALSE(l->components[kKey].strides.has_value());
}

TEST(ParseLayout, RejectsBadText) {
  const std::string base = toString(test::mimoLayout());
  struct Case {
    std::string text;
    std::string mustMention;
  } cases[] = {
      {"", "expected"},
      {"num_kv_heads = 4", "missing required field 'head_size_k'"},
      {base + ", bogus = 1",
       "unknown field 'bogus' (expected num_kv_heads, block_size, "
       "head_size_k, head_size_v, components, order, packing, dtype, scale "
       "or NAME_strides)"},
      {base + ", num_kv_heads = 4", "duplicate field 'num_kv_heads'"},
      {"num_kv_heads = four, head_size_k = 192, head_size_v = 128, "
       "block_size = 16, order = nhd, packing = separate, dtype = bf16, "
       "scale = none",
       "num_kv_heads"},
      {"num_kv_heads = 4, head_size_k = 192, head_size_v = 128, "
       "block_size = 16, order = xyz, packing = separate, dtype = bf16, "
       "scale = none",
       "order"},
      {"num_kv_heads = 4, head_size_k = 192, head_size_v = 128, "
       "block_size = 16, order = nhd, packing = separate, dtype = bf17, "
       "scale = none",
       "dtype"},
      {base + ", k_strides = [1, 2]", "k_strides"},
      {base + ", k_strides = [1, 2, x]", "k_strides"},
      {base + ", v_strides = 1, 2, 3", "v_strides"},
      {base + ", k_strides = [1, 2, 99999999999999999999]", "k_strides"},
      {"num_kv_heads 4", "expected '=' after 'num_kv_heads'"},
  };
  for (const Case &c : cases) {
    std::string err;
    EXPECT_FALSE(parseLayout(c.text, &err).has_value()) << c.text;
    EXPECT_NE(err.find(c.mustMention), std::string::npos)
        << "text: " << c.text << "\nerror: " << err;
  }
}

} // namespace

TEST(ParseLayout, NamedComponents) {
  std::string err;
  std::optional<LayoutDesc> mla = parseLayout(
      "num_kv_heads = 1, components = [kv_c: 512, k_pe: 64], block_size = "
      "64, packing = packed, dtype = f8E4M3FN, scale = per_tensor",
      &err);
  ASSERT_TRUE(mla) << err;
  EXPECT_FALSE(mla->validate().has_value());
  EXPECT_FALSE(mla->isKV());
  ASSERT_EQ(mla->numComponents(), 2);
  EXPECT_EQ(mla->find("k_pe"), 1);
  EXPECT_EQ(mla->find("k"), -1);
  EXPECT_EQ(mla->headSize(0), 512);
  EXPECT_EQ(mla->base(1), 512);
  EXPECT_EQ(mla->rowWidth(1), 576);
  // One packed row of 576 per token: block stride 64 * 576.
  EXPECT_EQ(mla->strides(1).block, 64 * 576);
  std::optional<LayoutDesc> back = parseLayout(toString(*mla), &err);
  ASSERT_TRUE(back) << err;
  EXPECT_TRUE(*back == *mla);
  EXPECT_NE(toString(*mla).find("components = [kv_c: 512, k_pe: 64]"),
            std::string::npos);

  // `components = [k: .., v: ..]` is the K/V layout and prints as sugar.
  std::optional<LayoutDesc> kv = parseLayout(
      "num_kv_heads = 4, components = [k: 192, v: 128], block_size = 16, "
      "dtype = bf16",
      &err);
  ASSERT_TRUE(kv) << err;
  EXPECT_TRUE(*kv == LayoutDesc::kv(4, 192, 128, 16));
  EXPECT_EQ(toString(*kv), toString(LayoutDesc::kv(4, 192, 128, 16)));
}
