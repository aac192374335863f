//===- LayoutParseTest.cpp - parseLayout <-> toString(LayoutDesc) ---------===//
#include "TestKernels.h"
#include "kvgen/Layout.h"

#include <gtest/gtest.h>

using namespace kvgen;

namespace {

void expectSame(const LayoutDesc &a, const LayoutDesc &b) {
  EXPECT_EQ(a.numKvHeads, b.numKvHeads);
  EXPECT_EQ(a.headSizeK, b.headSizeK);
  EXPECT_EQ(a.headSizeV, b.headSizeV);
  EXPECT_EQ(a.blockSize, b.blockSize);
  EXPECT_EQ(a.order, b.order);
  EXPECT_EQ(a.packing, b.packing);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.scale, b.scale);
  ASSERT_EQ(a.kStrides.has_value(), b.kStrides.has_value());
  if (a.kStrides)
    EXPECT_TRUE(*a.kStrides == *b.kStrides);
  ASSERT_EQ(a.vStrides.has_value(), b.vStrides.has_value());
  if (a.vStrides)
    EXPECT_TRUE(*a.vStrides == *b.vStrides);
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
  dyn.kStrides = Strides{kDynamic, 768, 192};
  dyn.vStrides = Strides{kDynamic, kDynamic, kDynamic};
  out.push_back(dyn);
  LayoutDesc mla;
  mla.numKvHeads = 1;
  mla.headSizeK = 576;
  mla.headSizeV = 512;
  mla.blockSize = 1;
  mla.dtype = DType::F32;
  mla.kStrides = Strides{1 << 20, 576, 0};
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
  EXPECT_EQ(l->headSizeK, 192);
  EXPECT_EQ(l->headSizeV, 128);
  EXPECT_EQ(l->blockSize, 16);
  ASSERT_TRUE(l->kStrides);
  EXPECT_EQ(l->kStrides->block, kDynamic);
  EXPECT_EQ(l->kStrides->token, 768);
  EXPECT_EQ(l->kStrides->head, 192);
  ASSERT_TRUE(l->vStrides);
  EXPECT_EQ(l->vStrides->block, 8192);
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
  EXPECT_EQ(l->headSizeK, 80);
  EXPECT_EQ(l->headSizeV, 64);
  EXPECT_EQ(l->packing, Packing::Packed);
  EXPECT_EQ(l->order, Order::HND);
  EXPECT_EQ(l->dtype, DType::F16);
  EXPECT_FALSE(l->kStrides.has_value());
}

TEST(ParseLayout, RejectsBadText) {
  const std::string base = toString(test::mimoLayout());
  struct Case {
    std::string text;
    std::string mustMention;
  } cases[] = {
      {"", "expected"},
      {"num_kv_heads = 4", "missing field 'head_size_k'"},
      {base + ", bogus = 1", "unknown field 'bogus'"},
      {base + ", num_kv_heads = 4", "given twice"},
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
      {"num_kv_heads 4", "expected 'field = value'"},
  };
  for (const Case &c : cases) {
    std::string err;
    EXPECT_FALSE(parseLayout(c.text, &err).has_value()) << c.text;
    EXPECT_NE(err.find(c.mustMention), std::string::npos)
        << "text: " << c.text << "\nerror: " << err;
  }
}

} // namespace
