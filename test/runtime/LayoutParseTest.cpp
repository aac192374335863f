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
       "head_size_k, head_size_v, components, order, packing, dtype, scale, "
       "NAME_strides, NAME_elem_stride, NAME_token_chunks, "
       "NAME_elem_chunks, NAME_tile_scales or NAME_dtype)"},
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

// Issue 26, rows 6 and 7: lists and integers are bounded while they are
// read. Each text is about 1 MB (or 1M digits); a pairwise check of the
// names before the 1..4 bound once took over 20 s on the first two.
TEST(ParseLayout, StopsAtTheFirstEntryPastABound) {
  const std::string head = "num_kv_heads = 1, block_size = 16, dtype = bf16, ";
  const int n = 100000;
  std::string components = head + "components = [";
  std::string strideFields = head + "components = [c0: 8]";
  std::string strideList = head + "components = [c0: 8], c0_strides = [1";
  for (int i = 0; i < n; ++i) {
    components += (i ? ", c" : "c") + std::to_string(i) + ": 8";
    strideFields += ", c" + std::to_string(i) + "_strides = [?, ?, ?]";
    strideList += ", 1";
  }
  components += "]";
  strideList += "]";
  const std::string digits = "num_kv_heads = " + std::string(1000000, '1') +
                             ", head_size_k = 8, head_size_v = 8, "
                             "block_size = 16, dtype = bf16";
  struct Case {
    const std::string &text;
    const char *message;
  } cases[] = {
      {components, "a layout has 1 to 4 components, got more than 4 (at 'c4: "
                   "8"},
      {strideFields, "a layout has at most 4 components, so at most 4 "
                     "'_strides' fields; 'c4_strides' is one more"},
      {strideList, "'c0_strides' must have 3 entries [block, token, head], "
                   "got more than 3"},
      {digits, "'num_kv_heads' is out of range: a layout's integers are "
               "64-bit, of at most 19 digits"},
  };
  for (const Case &c : cases) {
    std::string err;
    EXPECT_FALSE(parseLayout(c.text, &err).has_value());
    EXPECT_NE(err.find(c.message), std::string::npos) << err;
  }
}

// The digit bound: 19 digits (leading zeros too) are an integer, 20 are
// not, and a value outside int64 is refused by the same message.
TEST(ParseLayout, IntegersHaveAtMost19Digits) {
  auto withBlock = [](const std::string &v) {
    return "num_kv_heads = 1, head_size_k = 8, head_size_v = 8, "
           "block_size = " +
           v + ", dtype = bf16";
  };
  std::string err;
  std::optional<LayoutDesc> l =
      parseLayout(withBlock("0000000000000000016"), &err);
  ASSERT_TRUE(l) << err;
  EXPECT_EQ(l->blockSize, 16);
  const char *outOfRange = "'block_size' is out of range: a layout's "
                           "integers are 64-bit, of at most 19 digits";
  for (const char *v : {"00000000000000000016", "9223372036854775808",
                        "-9223372036854775809"}) {
    EXPECT_FALSE(parseLayout(withBlock(v), &err)) << v;
    EXPECT_NE(err.find(outOfRange), std::string::npos) << v << ": " << err;
  }
  // In range: validate's bound (2^20) is not the parser's business.
  l = parseLayout(withBlock("9223372036854775807"), &err);
  ASSERT_TRUE(l) << err;
  EXPECT_EQ(l->blockSize, INT64_MAX);
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
