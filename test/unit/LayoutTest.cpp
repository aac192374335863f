//===- LayoutTest.cpp - Unit tests of the MLIR-free layout model ----------===//
//
// Checks kvgen::elementOffset / LayoutDesc::map, the extents and the
// validate() diagnostics against numbers computed by hand. The arithmetic is
// written out next to each expectation; units are elements unless a name
// says bytes.
//
//===----------------------------------------------------------------------===//
#include "kvgen/Layout.h"
#include "kvgen/LayoutMap.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

using namespace kvgen;

namespace {

LayoutDesc makeLayout(int64_t heads, int64_t hk, int64_t hv, int64_t block,
                      Order order = Order::NHD,
                      Packing packing = Packing::Separate,
                      DType dtype = DType::BF16,
                      ScaleKind scale = ScaleKind::None) {
  return LayoutDesc::kv(heads, hk, hv, block, dtype, scale, packing, order);
}

/// MiMo-V2-Flash full attention: 4 kv heads, K 192 wide, V 128 wide.
LayoutDesc mimo(int64_t block = 16, Order order = Order::NHD,
                Packing packing = Packing::Separate) {
  return makeLayout(4, 192, 128, block, order, packing);
}

std::string validateMessage(const LayoutDesc &l) {
  std::optional<std::string> err = l.validate();
  return err ? *err : std::string("<valid>");
}

void expectMap(const SideMap &m, int64_t block, int64_t token, int64_t head,
               int64_t base) {
  EXPECT_EQ(m.block, block);
  EXPECT_EQ(m.token, token);
  EXPECT_EQ(m.head, head);
  EXPECT_EQ(m.base, base);
}

//===----------------------------------------------------------------------===//
// The address formula itself.
//===----------------------------------------------------------------------===//

TEST(ElementOffset, IsTheLinearFormula) {
  SideMap m{1000, 100, 10, 3};
  // 2 * 1000 + 4 * 100 + 5 * 10 + 3 + 6 = 2000 + 400 + 50 + 9 = 2459.
  EXPECT_EQ(elementOffset(m, 2, 4, 5, 6), 2459);
  EXPECT_EQ(elementOffset(m, 0, 0, 0, 0), 3);
}

TEST(ElementOffset, IsSixtyFourBit) {
  // A cache beyond 2^31 elements: block 70000 of 32768-element blocks is at
  // 70000 * 32768 = 2293760000 > INT32_MAX = 2147483647.
  SideMap m{32768, 1024, 128, 0};
  EXPECT_EQ(elementOffset(m, 70000, 0, 0, 0), int64_t(2293760000));
  // + 15 * 1024 + 7 * 128 + 127 = 15360 + 896 + 127 = 16383.
  EXPECT_EQ(elementOffset(m, 70000, 15, 7, 127), int64_t(2293776383));
}

//===----------------------------------------------------------------------===//
// NHD.
//===----------------------------------------------------------------------===//

TEST(LayoutMap, NhdSeparateMimo) {
  LayoutDesc l = mimo();
  ASSERT_FALSE(l.validate());
  // K rows are 192 wide: head 192, token 4 * 192 = 768,
  // block 16 * 768 = 12288.
  SideMap k = l.map(kKey);
  expectMap(k, 12288, 768, 192, 0);
  // V rows are 128 wide: head 128, token 4 * 128 = 512, block 16 * 512 = 8192.
  SideMap v = l.map(kValue);
  expectMap(v, 8192, 512, 128, 0);

  // K(2, 5, 3, 7) = 2 * 12288 + 5 * 768 + 3 * 192 + 7
  //              = 24576 + 3840 + 576 + 7 = 28999.
  EXPECT_EQ(elementOffset(k, 2, 5, 3, 7), 28999);
  // V(2, 5, 3, 7) = 2 * 8192 + 5 * 512 + 3 * 128 + 7
  //              = 16384 + 2560 + 384 + 7 = 19335.
  EXPECT_EQ(elementOffset(v, 2, 5, 3, 7), 19335);
  // The last K element of token 0 of block 0 and the first of token 1 are
  // adjacent: 3 * 192 + 191 = 767, then 768.
  EXPECT_EQ(elementOffset(k, 0, 0, 3, 191) + 1, elementOffset(k, 0, 1, 0, 0));
  // The same holds for V with V's width (3 * 128 + 127 = 511, then 512): V
  // is never addressed with K's width.
  EXPECT_EQ(elementOffset(v, 0, 0, 3, 127) + 1, elementOffset(v, 0, 1, 0, 0));
}

TEST(LayoutExtent, NhdSeparateMimo) {
  LayoutDesc l = mimo();
  // K, 10 blocks: K(9, 15, 3, 191) + 1 = 9 * 12288 + 15 * 768 + 3 * 192 +
  // 191 + 1 = 110592 + 11520 + 576 + 192 = 122880 = 10 * 12288.
  EXPECT_EQ(l.extentElements(kKey, 10), 122880);
  // bf16: 122880 * 2 = 245760 bytes.
  EXPECT_EQ(l.extentBytes(kKey, 10), 245760);
  // V, 10 blocks: 10 * 8192 = 81920 elements, 163840 bytes.
  EXPECT_EQ(l.extentElements(kValue, 10), 81920);
  EXPECT_EQ(l.extentBytes(kValue, 10), 163840);
  // One block: K 12288, V 8192.
  EXPECT_EQ(l.extentElements(kKey, 1), 12288);
  EXPECT_EQ(l.extentElements(kValue, 1), 8192);
  // No blocks, no bytes.
  EXPECT_EQ(l.extentElements(kKey, 0), 0);
  EXPECT_EQ(l.extentBytes(kValue, 0), 0);
}

TEST(LayoutMap, NhdSymmetricLlama) {
  // Llama-3.1-8B: 8 x 128, block 16, f16.
  LayoutDesc l = makeLayout(8, 128, 128, 16, Order::NHD, Packing::Separate,
                            DType::F16);
  ASSERT_FALSE(l.validate());
  // head 128, token 8 * 128 = 1024, block 16 * 1024 = 16384; same for V.
  expectMap(l.map(kKey), 16384, 1024, 128, 0);
  expectMap(l.map(kValue), 16384, 1024, 128, 0);
  // (1, 2, 3, 4) = 16384 + 2048 + 384 + 4 = 18820.
  EXPECT_EQ(elementOffset(l.map(kKey), 1, 2, 3, 4), 18820);
  EXPECT_EQ(elementOffset(l.map(kValue), 1, 2, 3, 4), 18820);
  // 3 blocks: 3 * 16384 = 49152 elements, 98304 bytes.
  EXPECT_EQ(l.extentElements(kKey, 3), 49152);
  EXPECT_EQ(l.extentBytes(kValue, 3), 98304);
}

//===----------------------------------------------------------------------===//
// HND.
//===----------------------------------------------------------------------===//

TEST(LayoutMap, HndSeparate) {
  // 8 x 128, block 16, f16, [num_blocks, heads, block, head_size].
  LayoutDesc l = makeLayout(8, 128, 128, 16, Order::HND, Packing::Separate,
                            DType::F16);
  ASSERT_FALSE(l.validate());
  // token 128, head 16 * 128 = 2048, block 8 * 2048 = 16384.
  SideMap k = l.map(kKey);
  expectMap(k, 16384, 128, 2048, 0);
  // (1, 3, 5, 9) = 16384 + 3 * 128 + 5 * 2048 + 9
  //             = 16384 + 384 + 10240 + 9 = 27017.
  EXPECT_EQ(elementOffset(k, 1, 3, 5, 9), 27017);
  // 4 blocks: K(3, 15, 7, 127) + 1 = 49152 + 1920 + 14336 + 127 + 1 = 65536.
  EXPECT_EQ(l.extentElements(kKey, 4), 65536);
  // f16: 131072 bytes.
  EXPECT_EQ(l.extentBytes(kKey, 4), 131072);
}

TEST(LayoutMap, HndSeparateMimo) {
  LayoutDesc l = mimo(64, Order::HND);
  ASSERT_FALSE(l.validate());
  // K: token 192, head 64 * 192 = 12288, block 4 * 12288 = 49152.
  expectMap(l.map(kKey), 49152, 192, 12288, 0);
  // V: token 128, head 64 * 128 = 8192, block 4 * 8192 = 32768.
  expectMap(l.map(kValue), 32768, 128, 8192, 0);
  // V(1, 63, 2, 100) = 32768 + 63 * 128 + 2 * 8192 + 100
  //                 = 32768 + 8064 + 16384 + 100 = 57316.
  EXPECT_EQ(elementOffset(l.map(kValue), 1, 63, 2, 100), 57316);
  // K(1, 63, 2, 100) = 49152 + 12096 + 24576 + 100 = 85924.
  EXPECT_EQ(elementOffset(l.map(kKey), 1, 63, 2, 100), 85924);
}

//===----------------------------------------------------------------------===//
// Packed K|V rows.
//===----------------------------------------------------------------------===//

TEST(LayoutMap, PackedNhd) {
  LayoutDesc l = mimo(16, Order::NHD, Packing::Packed);
  ASSERT_FALSE(l.validate());
  // Rows of 192 + 128 = 320: head 320, token 4 * 320 = 1280,
  // block 16 * 1280 = 20480. K starts at column 0, V at column 192.
  EXPECT_EQ(l.rowWidth(kKey), 320);
  EXPECT_EQ(l.rowWidth(kValue), 320);
  EXPECT_EQ(l.base(kKey), 0);
  EXPECT_EQ(l.base(kValue), 192);
  SideMap k = l.map(kKey), v = l.map(kValue);
  expectMap(k, 20480, 1280, 320, 0);
  expectMap(v, 20480, 1280, 320, 192);
  // K(1, 2, 3, 4) = 20480 + 2560 + 960 + 4 = 24004; V adds the base 192.
  EXPECT_EQ(elementOffset(k, 1, 2, 3, 4), 24004);
  EXPECT_EQ(elementOffset(v, 1, 2, 3, 4), 24196);
  // K's last column is followed by V's first in the same row.
  EXPECT_EQ(elementOffset(k, 0, 0, 0, 191) + 1, elementOffset(v, 0, 0, 0, 0));
  // V's last column is followed by the next head's K.
  EXPECT_EQ(elementOffset(v, 0, 0, 0, 127) + 1, elementOffset(k, 0, 0, 1, 0));
  // 3 blocks: K(2, 15, 3, 191) + 1 = 40960 + 19200 + 960 + 191 + 1 = 61312;
  // V(2, 15, 3, 127) + 1 = 40960 + 19200 + 960 + 192 + 127 + 1 = 61440
  // = 3 * 20480, the whole tensor.
  EXPECT_EQ(l.extentElements(kKey, 3), 61312);
  EXPECT_EQ(l.extentElements(kValue, 3), 61440);
  EXPECT_EQ(l.extentBytes(kValue, 3), 122880);
}

TEST(LayoutMap, PackedHnd) {
  LayoutDesc l = mimo(16, Order::HND, Packing::Packed);
  ASSERT_FALSE(l.validate());
  // token 320, head 16 * 320 = 5120, block 4 * 5120 = 20480.
  expectMap(l.map(kKey), 20480, 320, 5120, 0);
  expectMap(l.map(kValue), 20480, 320, 5120, 192);
  // V(1, 2, 3, 4) = 20480 + 640 + 15360 + 192 + 4 = 36676.
  EXPECT_EQ(elementOffset(l.map(kValue), 1, 2, 3, 4), 36676);
}

TEST(LayoutMap, PackedRow576) {
  // One 576-wide row per token: 512 + 64, 1 head, block 64.
  LayoutDesc l = makeLayout(1, 512, 64, 64, Order::NHD, Packing::Packed);
  ASSERT_FALSE(l.validate());
  // head 576, token 1 * 576 = 576, block 64 * 576 = 36864; V base 512.
  expectMap(l.map(kKey), 36864, 576, 576, 0);
  expectMap(l.map(kValue), 36864, 576, 576, 512);
  // K(1, 10, 0, 500) = 36864 + 5760 + 500 = 43124.
  EXPECT_EQ(elementOffset(l.map(kKey), 1, 10, 0, 500), 43124);
  // V(1, 10, 0, 63) = 36864 + 5760 + 512 + 63 = 43199.
  EXPECT_EQ(elementOffset(l.map(kValue), 1, 10, 0, 63), 43199);
  // 2 blocks: K(1, 63, 0, 511) + 1 = 36864 + 36288 + 511 + 1 = 73664;
  // V(1, 63, 0, 63) + 1 = 36864 + 36288 + 512 + 63 + 1 = 73728 = 2 * 36864.
  EXPECT_EQ(l.extentElements(kKey, 2), 73664);
  EXPECT_EQ(l.extentElements(kValue, 2), 73728);
  // bf16: 147328 and 147456 bytes.
  EXPECT_EQ(l.extentBytes(kKey, 2), 147328);
  EXPECT_EQ(l.extentBytes(kValue, 2), 147456);
}

TEST(LayoutMap, PackedSharesOneSidesExplicitStrides) {
  // Rows padded from 320 to 384 elements, stated on K only: V uses them too.
  LayoutDesc l = mimo(16, Order::NHD, Packing::Packed);
  // head 384, token 4 * 384 = 1536, block 16 * 1536 = 24576.
  l.components[kKey].strides = Strides{24576, 1536, 384};
  ASSERT_FALSE(l.validate());
  EXPECT_TRUE(l.strides(kValue) == l.strides(kKey));
  expectMap(l.map(kValue), 24576, 1536, 384, 192);
  // The same when only V states them.
  LayoutDesc w = mimo(16, Order::NHD, Packing::Packed);
  w.components[kValue].strides = Strides{24576, 1536, 384};
  ASSERT_FALSE(w.validate());
  expectMap(w.map(kKey), 24576, 1536, 384, 0);
  // A separate layout does not share: K keeps its dense strides.
  LayoutDesc s = mimo();
  s.components[kValue].strides = Strides{8448, 512, 128};
  expectMap(s.map(kKey), 12288, 768, 192, 0);
}

//===----------------------------------------------------------------------===//
// Explicit and dynamic strides.
//===----------------------------------------------------------------------===//

TEST(LayoutMap, CombinedKvAllocation) {
  // One [num_blocks, 2, 16, 8, 128] tensor: K = [:, 0], V = [:, 1]. Per
  // block 2 * 16 * 8 * 128 = 32768, per token 8 * 128 = 1024, per head 128;
  // the V pointer is the K pointer + 16 * 8 * 128 = 16384.
  LayoutDesc l = makeLayout(8, 128, 128, 16);
  l.components[kKey].strides = Strides{32768, 1024, 128};
  l.components[kValue].strides = Strides{32768, 1024, 128};
  ASSERT_FALSE(l.validate());
  // K(3, 7, 2, 5) = 98304 + 7168 + 256 + 5 = 105733.
  EXPECT_EQ(elementOffset(l.map(kKey), 3, 7, 2, 5), 105733);
  // 4 blocks: K(3, 15, 7, 127) + 1 = 98304 + 15360 + 896 + 127 + 1 = 114688;
  // from the V pointer the same, so V's last element is at
  // 16384 + 114688 = 131072 = 4 * 32768 from the K pointer: the allocation.
  EXPECT_EQ(l.extentElements(kKey, 4), 114688);
  EXPECT_EQ(l.extentElements(kValue, 4), 114688);
  EXPECT_EQ(16384 + l.extentElements(kValue, 4), 4 * 32768);
}

TEST(LayoutMap, PaddedBlocks) {
  LayoutDesc l = mimo();
  // Dense blocks are 12288 (K) and 8192 (V); pad each by 256.
  l.components[kKey].strides = Strides{12544, 768, 192};
  l.components[kValue].strides = Strides{8448, 512, 128};
  ASSERT_FALSE(l.validate());
  // K(1, 0, 0, 0) = 12544: block 1 starts after the padding.
  EXPECT_EQ(elementOffset(l.map(kKey), 1, 0, 0, 0), 12544);
  // 10 blocks: K(9, 15, 3, 191) + 1 = 112896 + 11520 + 576 + 191 + 1
  // = 125184 (the last block's padding is not needed).
  EXPECT_EQ(l.extentElements(kKey, 10), 125184);
  // V(9, 15, 3, 127) + 1 = 76032 + 7680 + 384 + 127 + 1 = 84224.
  EXPECT_EQ(l.extentElements(kValue, 10), 84224);
}

TEST(LayoutMap, DynamicStridesSuppliedAtRunTime) {
  LayoutDesc l = mimo();
  l.components[kKey].strides = Strides{kDynamic, kDynamic, kDynamic};
  // Dynamic strides pass validate(); overlap is checked at launch.
  ASSERT_FALSE(l.validate());
  EXPECT_TRUE(l.strides(kKey).anyDynamic());
  EXPECT_FALSE(l.strides(kValue).anyDynamic());
  const int64_t dyn[3] = {40000, 2000, 400};
  SideMap k = l.map(kKey, dyn);
  expectMap(k, 40000, 2000, 400, 0);
  // K(2, 3, 1, 10) = 80000 + 6000 + 400 + 10 = 86410.
  EXPECT_EQ(elementOffset(k, 2, 3, 1, 10), 86410);
  // 3 blocks: K(2, 15, 3, 191) + 1 = 80000 + 30000 + 1200 + 191 + 1 = 111392.
  EXPECT_EQ(l.extentElements(kKey, 3, dyn), 111392);
  EXPECT_EQ(l.extentBytes(kKey, 3, dyn), 222784);
  // V is static and ignores `dyn`: 3 * 8192.
  EXPECT_EQ(l.extentElements(kValue, 3, dyn), 24576);
  // validateStrides on the run-time values accepts these (rows of 192 inside
  // 400-element head slots)...
  Strides actual{40000, 2000, 400};
  EXPECT_FALSE(l.validateStrides({actual, l.strides(kValue)}));
  // ...and rejects a head stride narrower than K's row.
  Strides narrow{40000, 2000, 128};
  EXPECT_EQ(l.validateStrides({narrow, l.strides(kValue)}).value_or(""),
            "'k_strides' make two K positions overlap: K block 0, token "
            "0, head 0, element 128 and K block 0, token 0, head 1, "
            "element 0 are both at offset 128");
}

TEST(LayoutMap, MixedStaticAndDynamicStrides) {
  LayoutDesc l = mimo();
  // Only the block stride is dynamic; dyn[1] and dyn[2] are ignored.
  l.components[kKey].strides = Strides{kDynamic, 768, 192};
  const int64_t dyn[3] = {13000, -1, -1};
  expectMap(l.map(kKey, dyn), 13000, 768, 192, 0);
  // 2 blocks: 13000 + 15 * 768 + 3 * 192 + 191 + 1
  // = 13000 + 11520 + 576 + 192 = 25288.
  EXPECT_EQ(l.extentElements(kKey, 2, dyn), 25288);
}

TEST(LayoutExtent, ElementSizes) {
  // 4 x 192/128, block 16: K has 12288 elements per block.
  for (auto [dtype, scale, bytes] :
       {std::tuple{DType::BF16, ScaleKind::None, 2},
        std::tuple{DType::F16, ScaleKind::None, 2},
        std::tuple{DType::F32, ScaleKind::None, 4},
        std::tuple{DType::F8E4M3FN, ScaleKind::PerTensor, 1},
        std::tuple{DType::F8E4M3FNUZ, ScaleKind::PerHead, 1},
        std::tuple{DType::F8E5M2, ScaleKind::PerTensor, 1},
        std::tuple{DType::F8E5M2FNUZ, ScaleKind::PerHead, 1}}) {
    LayoutDesc l = makeLayout(4, 192, 128, 16, Order::NHD, Packing::Separate,
                              dtype, scale);
    SCOPED_TRACE(toString(dtype));
    EXPECT_FALSE(l.validate());
    EXPECT_EQ(elementSize(dtype), bytes);
    EXPECT_EQ(isFp8(dtype), bytes == 1);
    // Units are elements: the element extent does not depend on the dtype.
    EXPECT_EQ(l.extentElements(kKey, 2), 24576);
    EXPECT_EQ(l.extentBytes(kKey, 2), 24576 * bytes);
  }
}

TEST(LayoutText, PrintsTheAttributeBody) {
  LayoutDesc l = mimo(64);
  l.dtype = DType::F8E4M3FN;
  l.scale = ScaleKind::PerTensor;
  l.components[kKey].strides = Strides{kDynamic, 768, 192};
  EXPECT_EQ(toString(l),
            "num_kv_heads = 4, head_size_k = 192, head_size_v = 128, "
            "block_size = 64, order = nhd, packing = separate, "
            "dtype = f8E4M3FN, scale = per_tensor, k_strides = [?, 768, 192]");
  std::string error;
  std::optional<LayoutDesc> back = parseLayout(toString(l), &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(toString(*back), toString(l));
}

//===----------------------------------------------------------------------===//
// validate(): one message per error class.
//===----------------------------------------------------------------------===//

TEST(LayoutValidate, NonPositiveSizes) {
  LayoutDesc l = mimo();
  l.numKvHeads = 0;
  EXPECT_EQ(validateMessage(l), "'num_kv_heads' must be positive");
  l = mimo();
  l.components[kKey].headSize = -192;
  EXPECT_EQ(validateMessage(l), "'head_size_k' must be positive");
  l = mimo();
  l.components[kValue].headSize = 0;
  EXPECT_EQ(validateMessage(l), "'head_size_v' must be positive");
  l = mimo();
  l.blockSize = 0;
  EXPECT_EQ(validateMessage(l), "'block_size' must be positive");
}

TEST(LayoutValidate, ScaleRules) {
  LayoutDesc l = mimo();
  l.dtype = DType::F8E4M3FN;
  EXPECT_EQ(
      validateMessage(l),
      "'scale' must be per_tensor, per_head or per_tile for an fp8 cache");
  l.dtype = DType::F8E5M2FNUZ;
  EXPECT_EQ(
      validateMessage(l),
      "'scale' must be per_tensor, per_head or per_tile for an fp8 cache");
  l.scale = ScaleKind::PerHead;
  EXPECT_EQ(validateMessage(l), "<valid>");
  l.dtype = DType::BF16;
  EXPECT_EQ(validateMessage(l), "'scale' must be none for a bf16 cache");
  l.dtype = DType::F32;
  l.scale = ScaleKind::PerTensor;
  EXPECT_EQ(validateMessage(l), "'scale' must be none for a f32 cache");
}

TEST(LayoutValidate, NegativeStrides) {
  LayoutDesc l = mimo();
  l.components[kKey].strides = Strides{12288, -768, 192};
  EXPECT_EQ(validateMessage(l),
            "'k_strides' must be non-negative, got token stride -768");
  l = mimo();
  l.components[kValue].strides = Strides{8192, 512, -128};
  EXPECT_EQ(validateMessage(l),
            "'v_strides' must be non-negative, got head stride -128");
  // With a dynamic stride the static ones are still sign-checked.
  l = mimo();
  l.components[kValue].strides = Strides{kDynamic, -512, 128};
  EXPECT_EQ(validateMessage(l),
            "'v_strides' must be non-negative, got token stride -512");
}

TEST(LayoutValidate, ZeroBlockStride) {
  LayoutDesc l = mimo();
  l.components[kKey].strides = Strides{0, 768, 192};
  EXPECT_EQ(validateMessage(l), "'k_strides' block stride must be positive");
  l = mimo();
  l.components[kValue].strides = Strides{0, 512, 128};
  EXPECT_EQ(validateMessage(l), "'v_strides' block stride must be positive");
}

TEST(LayoutValidate, OverlappingK) {
  // A K/V width mix-up like the seed report's: K rows (192 wide) stepped
  // with V's head stride 128.
  LayoutDesc l = mimo();
  l.components[kKey].strides = Strides{8192, 512, 128};
  EXPECT_EQ(validateMessage(l),
            "'k_strides' make two K positions overlap: K block 1, token "
            "0, head 0, element 0 and K block 0, token 15, head 3, "
            "element 128 are both at offset 8192");
  // Tokens too close: token stride 700 < 4 * 192 = 768.
  l.components[kKey].strides = Strides{12288, 700, 192};
  EXPECT_EQ(validateMessage(l),
            "'k_strides' make two K positions overlap: K block 0, token "
            "0, head 3, element 124 and K block 0, token 1, head 0, "
            "element 0 are both at offset 700");
  // Blocks too close: 12000 < 16 * 768 = 12288.
  l.components[kKey].strides = Strides{12000, 768, 192};
  EXPECT_EQ(validateMessage(l),
            "'k_strides' make two K positions overlap: K block 1, token "
            "0, head 0, element 0 and K block 0, token 15, head 2, "
            "element 96 are both at offset 12000");
  // A zero head stride puts every head on the same row.
  l.components[kKey].strides = Strides{12288, 768, 0};
  EXPECT_EQ(validateMessage(l),
            "'k_strides' make two K positions overlap: K block 0, token "
            "0, head 1, element 0 and K block 0, token 0, head 2, "
            "element 0 are both at offset 0");
}

TEST(LayoutValidate, OverlappingV) {
  LayoutDesc l = mimo();
  // V rows of 128 with token stride 256 < 4 * 128.
  l.components[kValue].strides = Strides{8192, 256, 128};
  EXPECT_EQ(validateMessage(l),
            "'v_strides' make two V positions overlap: V block 0, token "
            "1, head 0, element 0 and V block 0, token 0, head 2, "
            "element 0 are both at offset 256");
}

TEST(LayoutValidate, PackedVOverlapsK) {
  LayoutDesc l = mimo(16, Order::NHD, Packing::Packed);
  // Row 320 wide: V of head 0 occupies 192..319; with V's head stride 192
  // V of head 1 starts at 192 + 192 = 384 but K of head 1 (K's stride 320)
  // spans 320..511.
  l.components[kKey].strides = Strides{20480, 1280, 320};
  l.components[kValue].strides = Strides{20480, 1280, 192};
  EXPECT_EQ(validateMessage(l),
            "'v_strides' make V overlap K in the packed row: K block 0, "
            "token 0, head 1, element 64 and V block 0, token 0, head 1, "
            "element 0 are both at offset 384");
}

TEST(LayoutValidate, SeparateSidesMayAlias) {
  // Separate K and V tensors are checked each on its own: identical strides
  // are fine (they address different tensors).
  LayoutDesc l = makeLayout(8, 128, 128, 16);
  l.components[kKey].strides = Strides{16384, 1024, 128};
  l.components[kValue].strides = Strides{16384, 1024, 128};
  EXPECT_EQ(validateMessage(l), "<valid>");
}

TEST(LayoutValidate, BlocksInterleavedIntoEachOther) {
  // Block b, token t at 64 * b + 128 * t (1 head, rows 64 wide): blocks 0
  // and 1 interleave cleanly, but block 2's token 0 (128) is block 0's
  // token 1 (128). The number of blocks is not part of the layout, so this
  // is an overlap.
  LayoutDesc l = makeLayout(1, 64, 64, 4);
  l.components[kKey].strides = Strides{64, 128, 64};
  SideMap k = l.map(kKey);
  ASSERT_EQ(elementOffset(k, 2, 0, 0, 0), elementOffset(k, 0, 1, 0, 0));
  EXPECT_EQ(validateMessage(l),
            "'k_strides' make two K positions overlap: K block 2, token "
            "0, head 0, element 0 and K block 0, token 1, head 0, "
            "element 0 are both at offset 128");
}

// An overlap that first appears between block 0 and block 100 (once missed
// by a check that enumerated 64 blocks). Here block b, token t starts at
// 64 * b + 6400 * t: blocks 0..99 tile [0, 6400) with token 0 and block
// 100's token 0 (6400) is block 0's token 1.
TEST(LayoutValidate, OverlapBeyondSixtyFourBlocks) {
  LayoutDesc l = makeLayout(1, 64, 64, 16);
  l.components[kKey].strides = Strides{64, 6400, 64};
  SideMap k = l.map(kKey);
  ASSERT_EQ(elementOffset(k, 100, 0, 0, 0), elementOffset(k, 0, 1, 0, 0));
  EXPECT_EQ(validateMessage(l),
            "'k_strides' make two K positions overlap: K block 100, "
            "token 0, head 0, element 0 and K block 0, token 1, head 0, "
            "element 0 are both at offset 6400");
}

//===----------------------------------------------------------------------===//
// Hostile input (issue 12): bounds, real causes, time independent of size.
//===----------------------------------------------------------------------===//

/// validate() with its wall time in milliseconds.
std::string timedValidate(const LayoutDesc &l, double *ms) {
  auto t0 = std::chrono::steady_clock::now();
  std::string m = validateMessage(l);
  *ms = std::chrono::duration<double, std::milli>(
            std::chrono::steady_clock::now() - t0)
            .count();
  return m;
}

// Each of these took seconds to minutes (or ran out of memory) when the
// overlap check built one interval per (token, head); 250 ms is generous for
// what is now a handful of comparisons, and far below the old times.
constexpr double kFastMs = 250;

TEST(LayoutHostile, HeadsAbove2To31AreRejectedByTheirBound) {
  // Grew past 12 GB in 37 s before.
  LayoutDesc l = makeLayout(int64_t(1) << 31, 128, 128, 16);
  double ms = 0;
  EXPECT_EQ(timedValidate(l, &ms),
            "'num_kv_heads' = 2147483648 exceeds 2^20 = 1048576, the bound "
            "that keeps cache offsets in 64 bits");
  EXPECT_LT(ms, kFastMs);
}

TEST(LayoutHostile, LargeHeadsTimesBlockSizeNamesTheDenseStride) {
  // Ran over 20 s before. Both sizes are within their bounds; the dense
  // block stride 65536 x 65536 x 128 = 2^39 is not.
  LayoutDesc l = makeLayout(65536, 128, 128, 65536);
  double ms = 0;
  EXPECT_EQ(timedValidate(l, &ms),
            "the dense block stride of K, block_size 65536 x num_kv_heads "
            "65536 x head_size_k 128 = 549755813888, exceeds 2^38 = "
            "274877906944, the bound that keeps cache offsets in 64 bits");
  EXPECT_LT(ms, kFastMs);
}

TEST(LayoutHostile, HugeBlockSize) {
  LayoutDesc l = makeLayout(4, 128, 128, int64_t(1) << 40);
  double ms = 0;
  EXPECT_EQ(timedValidate(l, &ms),
            "'block_size' = 1099511627776 exceeds 2^20 = 1048576, the bound "
            "that keeps cache offsets in 64 bits");
  EXPECT_LT(ms, kFastMs);
}

TEST(LayoutHostile, WrappingDenseProductsBlameTheSize) {
  // Before, the dense strides wrapped around and the message blamed
  // 'k_strides' ("must be non-negative", "block stride must be positive").
  for (int64_t heads : {INT64_MAX, int64_t(1) << 62}) {
    LayoutDesc l = makeLayout(heads, 128, 128, 16);
    EXPECT_EQ(
        validateMessage(l).rfind(
            "'num_kv_heads' = " + std::to_string(heads) + " exceeds 2^20", 0),
        0u)
        << validateMessage(l);
  }
  // All strides '?': the sizes are still bounded.
  LayoutDesc l = makeLayout(INT64_MAX, 128, 128, 16);
  l.components[kKey].strides = Strides{kDynamic, kDynamic, kDynamic};
  l.components[kValue].strides = Strides{kDynamic, kDynamic, kDynamic};
  EXPECT_NE(validateMessage(l).find("'num_kv_heads' = 9223372036854775807 "
                                    "exceeds"),
            std::string::npos);
}

TEST(LayoutHostile, StridesAboveTheBound) {
  LayoutDesc l = mimo();
  l.components[kKey].strides = Strides{int64_t(1) << 39, 768, 192};
  EXPECT_EQ(validateMessage(l),
            "'k_strides' block stride 549755813888 exceeds 2^38 = "
            "274877906944, the bound that keeps cache offsets in 64 bits");
  // A static entry next to '?' ones too.
  l.components[kKey].strides = Strides{kDynamic, int64_t(1) << 39, 192};
  EXPECT_EQ(validateMessage(l),
            "'k_strides' token stride 549755813888 exceeds 2^38 = "
            "274877906944, the bound that keeps cache offsets in 64 bits");
  // And the launch-time values of '?' strides.
  EXPECT_EQ(l.validateStrides(
                 {Strides{12288, 768, int64_t(1) << 40}, l.strides(kValue)})
                .value_or(""),
            "'k_strides' head stride 1099511627776 exceeds 2^38 = "
            "274877906944, the bound that keeps cache offsets in 64 bits");
}

TEST(LayoutHostile, LargeNestedLayoutIsProvenWithoutEnumerating) {
  // 1024 x 1024 rows per block (16x kMaxEnumeratedRows): dense strides are
  // nested, so validate() needs no enumeration.
  LayoutDesc l = makeLayout(1024, 128, 64, 1024, Order::HND, Packing::Packed);
  double ms = 0;
  EXPECT_EQ(timedValidate(l, &ms), "<valid>");
  EXPECT_LT(ms, kFastMs);
  // Padded explicit strides: still nested.
  l = makeLayout(1024, 128, 128, 1024);
  l.components[kKey].strides = Strides{(int64_t(1) << 27) + 4096, 131072, 128};
  EXPECT_EQ(timedValidate(l, &ms), "<valid>");
  EXPECT_LT(ms, kFastMs);
}

TEST(LayoutHostile, LargeNonNestedLayoutIsRejectedAsUnprovable) {
  // Blocks closer than their span (2^27 elements), too many rows to
  // enumerate: the message names the stride and the span.
  LayoutDesc l = makeLayout(1024, 128, 128, 1024);
  l.components[kKey].strides = Strides{int64_t(1) << 26, 131072, 128};
  double ms = 0;
  EXPECT_EQ(timedValidate(l, &ms),
            "'k_strides' = [67108864, 131072, 128] are not nested: the block "
            "stride 67108864 is smaller than 134217728, the span of the rows "
            "inside it; kvgen proves layouts of more than 65536 rows per "
            "block only when each stride is at least the span of the "
            "dimensions inside it (docs/layout.md)");
  EXPECT_LT(ms, kFastMs);
}

TEST(LayoutHostile, SmallNonNestedButDisjointLayoutIsAccepted) {
  // 2 tokens of one 1-wide row at 0 and 3, blocks 2 apart: block b holds
  // {2b, 2b + 3}, evens and odds, never equal. Not nested (2 < 4), decided
  // exactly by enumerating block 0's rows modulo 2.
  LayoutDesc l = makeLayout(1, 1, 1, 2);
  l.components[kKey].strides = Strides{2, 3, 1};
  EXPECT_EQ(validateMessage(l), "<valid>");
}

TEST(LayoutHostile, PackedComponentsWithOtherBlockStrides) {
  // K 5 wide at 10 * b, V 1 wide at 11 * b' + 5: K block 6 [60, 65) holds
  // V block 5 (60). The old check looked at 2 blocks and accepted this.
  LayoutDesc l = makeLayout(1, 5, 1, 1, Order::NHD, Packing::Packed);
  l.components[kKey].strides = Strides{10, 6, 6};
  l.components[kValue].strides = Strides{11, 6, 6};
  SideMap k = l.map(kKey), v = l.map(kValue);
  ASSERT_EQ(elementOffset(k, 6, 0, 0, 0), elementOffset(v, 5, 0, 0, 0));
  EXPECT_EQ(validateMessage(l),
            "'v_strides' make V overlap K in the packed row (their block "
            "strides 10 and 11 meet at positions congruent modulo 1)");
  // K at 2 * b, V at 4 * b' + 1: evens and odds, disjoint forever.
  l = makeLayout(1, 1, 1, 1, Order::NHD, Packing::Packed);
  l.components[kKey].strides = Strides{2, 2, 2};
  l.components[kValue].strides = Strides{4, 4, 4};
  EXPECT_EQ(validateMessage(l), "<valid>");
}

TEST(LayoutHostile, CheckedExtentRefusesOverflowAndBadStrides) {
  LayoutDesc l = mimo();
  EXPECT_EQ(l.checkedExtentBytes(kKey, 10), l.extentBytes(kKey, 10));
  EXPECT_EQ(l.checkedExtentBytes(kKey, 0), 0);
  EXPECT_FALSE(l.checkedExtentBytes(kKey, INT64_MAX));
  l.components[kKey].strides = Strides{kDynamic, 768, 192};
  const int64_t neg[3] = {-12288, 0, 0}, big[3] = {int64_t(1) << 39, 0, 0},
                ok[3] = {12288, 0, 0};
  EXPECT_FALSE(l.checkedExtentBytes(kKey, 2, neg));
  EXPECT_FALSE(l.checkedExtentBytes(kKey, 2, big));
  EXPECT_FALSE(l.checkedExtentBytes(kKey, 2, nullptr));
  EXPECT_EQ(l.checkedExtentBytes(kKey, 2, ok), l.extentBytes(kKey, 2, ok));
}

TEST(LayoutHostile, TypedMinimumIsNotDynamic) {
  // `?` is a token of its own: INT64_MIN typed as a number was read as `?`
  // and printed back as one.
  std::string err;
  std::optional<LayoutDesc> l = parseLayout(
      "num_kv_heads = 4, head_size_k = 192, head_size_v = 128, block_size = "
      "16, dtype = bf16, k_strides = [-9223372036854775808, 768, 192]",
      &err);
  EXPECT_FALSE(l);
  EXPECT_EQ(err, "'k_strides' entry -9223372036854775808 is not a stride "
                 "(strides are 0 to 2^38; write ? for a dynamic one) (at "
                 "'-9223372036854775808, 76')");
  l = parseLayout("num_kv_heads = 4, head_size_k = 192, head_size_v = 128, "
                  "block_size = 16, dtype = bf16, k_strides = [?, 768, 192]",
                  &err);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->components[kKey].strides->block, kDynamic);
  // Other negative numbers stay numbers, for validate() to name.
  l = parseLayout("num_kv_heads = 4, head_size_k = 192, head_size_v = 128, "
                  "block_size = 16, dtype = bf16, k_strides = "
                  "[-9223372036854775807, 768, 192]",
                  &err);
  ASSERT_TRUE(l);
  EXPECT_EQ(validateMessage(*l), "'k_strides' must be non-negative, got "
                                 "block stride -9223372036854775807");
}

TEST(LayoutHostile, OneGrammarForIntegersAndComments) {
  // Found by the fuzzer: the text parser took `+6`, which MLIR's attribute
  // parser refuses; MLIR took `0x10` and `- 5`, which the text parser
  // refuses. The grammar's integers are decimal with '-' right before the
  // digits, in both (the MLIR side is test/lit/Dialect/invalid-bounds.mlir).
  const std::string head = "num_kv_heads = 4, head_size_k = 192, "
                           "head_size_v = 128, dtype = bf16, block_size = ";
  std::string err;
  EXPECT_FALSE(parseLayout(head + "+6", &err));
  EXPECT_EQ(err, "'block_size' must be an integer (at '+6')");
  EXPECT_FALSE(parseLayout(head + "0x10", &err));
  EXPECT_FALSE(parseLayout(head + "- 5", &err));
  // `//` comments separate tokens, as in MLIR.
  std::optional<LayoutDesc> l =
      parseLayout(head + "16 // tokens per block\n, order = hnd", &err);
  ASSERT_TRUE(l) << err;
  EXPECT_EQ(l->blockSize, 16);
  EXPECT_EQ(l->order, Order::HND);
  // A comment ends at '\r' as at '\n' (MLIR's lexer; found by the fuzzer
  // with the chunk fields' dictionary: the text parser read the rest of
  // the layout as the comment and refused what MLIR accepted).
  l = parseLayout(head + "16 // k_token_chunks\r, order = hnd", &err);
  ASSERT_TRUE(l) << err;
  EXPECT_EQ(l->order, Order::HND);
}

//===----------------------------------------------------------------------===//
// Chunked dimensions (Chunks): the legacy vLLM and ROCm aiter layouts.
// Each expected offset is the row-major index of a 5-D (or 4-D) tensor
// written out with its own shape, independent of the chunk terms.
//===----------------------------------------------------------------------===//

/// bf16, 2 kv heads, head size 16, blocks of 4 tokens, x = 8 (16 bytes).
constexpr int64_t kH = 2, kD = 16, kBS = 4, kX = 8, kNB = 3;

/// The text of a K/V layout whose V is adjacent NHD and whose K has the
/// given strides and chunk fields (`extra`).
std::string chunkedText(const std::string &extra) {
  return "num_kv_heads = 2, head_size_k = 16, head_size_v = 16, "
         "block_size = 4, dtype = bf16, " +
         extra;
}

LayoutDesc parsed(const std::string &text) {
  std::string err;
  std::optional<LayoutDesc> l = parseLayout(text, &err);
  EXPECT_TRUE(l) << text << ": " << err;
  return l ? *l : LayoutDesc();
}

TEST(ChunkedLayout, VllmLegacyKey) {
  // K [nb, H, D/x, bs, x]: strides 128, 64, 32, 8, 1.
  LayoutDesc l = parsed(chunkedText(
      "k_strides = [128, 8, 64], k_elem_chunks = [8, 32]"));
  ASSERT_EQ(validateMessage(l), "<valid>");
  SideMap m = l.map(kKey);
  for (int64_t b = 0; b < kNB; ++b)
    for (int64_t t = 0; t < kBS; ++t)
      for (int64_t h = 0; h < kH; ++h)
        for (int64_t e = 0; e < kD; ++e) {
          int64_t index =
              (((b * kH + h) * (kD / kX) + e / kX) * kBS + t) * kX + e % kX;
          ASSERT_EQ(elementOffset(m, b, t, h, e), index)
              << b << " " << t << " " << h << " " << e;
        }
  EXPECT_EQ(l.extentElements(kKey, kNB), kNB * kH * kD * kBS);
  EXPECT_EQ(l.denseBlockElements(0), kH * kD * kBS);
  EXPECT_TRUE(elemRunAdjacent(m, 8));
  EXPECT_FALSE(elemRunAdjacent(m, 16)); // crosses a chunk
}

TEST(ChunkedLayout, VllmLegacyValue) {
  // V [nb, H, D, bs]: strides 128, 64, 4, 1: the element stride is bs.
  LayoutDesc l = parsed(chunkedText(
      "v_strides = [128, 1, 64], v_elem_stride = 4"));
  ASSERT_EQ(validateMessage(l), "<valid>");
  SideMap m = l.map(kValue);
  for (int64_t b = 0; b < kNB; ++b)
    for (int64_t t = 0; t < kBS; ++t)
      for (int64_t h = 0; h < kH; ++h)
        for (int64_t e = 0; e < kD; ++e)
          ASSERT_EQ(elementOffset(m, b, t, h, e),
                    ((b * kH + h) * kD + e) * kBS + t);
  EXPECT_EQ(l.extentElements(kValue, kNB), kNB * kH * kD * kBS);
  EXPECT_EQ(l.denseBlockElements(1), kH * kD * kBS);
  EXPECT_TRUE(elemRunAdjacent(m, 1));
  EXPECT_FALSE(elemRunAdjacent(m, 2));
}

TEST(ChunkedLayout, AiterShuffledValue) {
  // V [nb, H, bs/x, D, x] with x = 2 (blocks of 4 tokens): strides 128,
  // 64, 32, 2, 1. Token t at (t / 2) * 32 + (t % 2), element e at 2 e.
  LayoutDesc l = parsed(chunkedText(
      "v_strides = [128, 1, 64], v_token_chunks = [2, 32], "
      "v_elem_stride = 2"));
  ASSERT_EQ(validateMessage(l), "<valid>");
  SideMap m = l.map(kValue);
  const int64_t x = 2;
  for (int64_t b = 0; b < kNB; ++b)
    for (int64_t t = 0; t < kBS; ++t)
      for (int64_t h = 0; h < kH; ++h)
        for (int64_t e = 0; e < kD; ++e)
          ASSERT_EQ(elementOffset(m, b, t, h, e),
                    (((b * kH + h) * (kBS / x) + t / x) * kD + e) * x + t % x);
  // slotOffset + rowOffset is the same split as for adjacent rows.
  EXPECT_EQ(slotOffset(m, 2, 3) + rowOffset(m, 1, 5),
            elementOffset(m, 2, 3, 1, 5));
  EXPECT_EQ(l.extentElements(kValue, kNB), kNB * kH * kD * kBS);
}

TEST(ChunkedLayout, PrintsAndParsesBack) {
  LayoutDesc l = parsed(chunkedText(
      "k_strides = [128, 8, 64], k_elem_chunks = [8, 32], "
      "v_strides = [128, 1, 64], v_token_chunks = [2, 32], "
      "v_elem_stride = 2"));
  const std::string text = toString(l);
  EXPECT_NE(text.find(", k_strides = [128, 8, 64], k_elem_chunks = [8, 32]"),
            std::string::npos)
      << text;
  // Fields at their defaults (v_elem_chunks, k_elem_stride) are not printed.
  EXPECT_NE(text.find(", v_strides = [128, 1, 64], v_elem_stride = 2, "
                      "v_token_chunks = [2, 32]"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("v_elem_chunks"), std::string::npos) << text;
  EXPECT_EQ(text.find("k_elem_stride"), std::string::npos) << text;
  LayoutDesc back = parsed(text);
  EXPECT_TRUE(back == l);
  EXPECT_EQ(toString(back), text);
}

TEST(ChunkedLayout, RejectsWhatItCannotServe) {
  // A chunk that does not divide its dimension.
  EXPECT_EQ(validateMessage(parsed(chunkedText(
                "k_strides = [128, 8, 64], k_elem_chunks = [3, 32]"))),
            "'k_elem_chunks' chunk size 3 must divide the head size 16");
  EXPECT_EQ(validateMessage(parsed(chunkedText(
                "v_strides = [128, 1, 64], v_token_chunks = [3, 32]"))),
            "'v_token_chunks' chunk size 3 must divide block_size 4");
  // Chunks overlapping the tokens: chunk stride 16 < the 4 tokens x 8
  // elements inside it.
  EXPECT_EQ(validateMessage(parsed(chunkedText(
                "k_strides = [128, 8, 64], k_elem_chunks = [8, 16]"))),
            "the strides of K with its chunks are not nested: the element "
            "chunk stride 16 is smaller than 32, the span of the dimensions "
            "inside it; kvgen proves chunked layouts only when each stride "
            "is at least the span of the dimensions inside it "
            "(docs/layout.md)");
  // An element stride of 0 puts every element of a row at one address.
  EXPECT_NE(validateMessage(parsed(chunkedText(
                "v_strides = [128, 1, 64], v_elem_stride = 0")))
                .find("the element stride 0 is smaller than 1"),
            std::string::npos);
  // Packed rows keep their elements adjacent.
  EXPECT_EQ(validateMessage(parsed(chunkedText(
                "packing = packed, v_elem_stride = 2"))),
            "'v' has chunks or an element stride, which kvgen serves in "
            "separate layouts only (a packed row keeps its components' "
            "elements adjacent)");
  // A chunk field naming no component.
  std::string err;
  EXPECT_FALSE(parseLayout(chunkedText("q_elem_stride = 2"), &err));
  EXPECT_NE(err.find("'q' of a chunk field names no component"),
            std::string::npos)
      << err;
  EXPECT_FALSE(parseLayout(chunkedText("k_elem_chunks = [8]"), &err));
  EXPECT_NE(err.find("expected ','"), std::string::npos) << err;
}

TEST(ChunkedLayout, BoundsCheckedExtent) {
  LayoutDesc l = parsed(chunkedText(
      "k_strides = [128, 8, 64], k_elem_chunks = [8, 32]"));
  EXPECT_EQ(l.checkedExtentBytes(kKey, kNB), kNB * 128 * 2);
  EXPECT_EQ(l.extentBytes(kKey, kNB), kNB * 128 * 2);
}

} // namespace

// vLLM's fp8_ds_mla entry as a per_tile layout: kv_c's 512 e4m3fn values
// and their 4 float32 tile scales (bytes 512 to 528), then k_pe's 64 bf16
// values (bytes 528 to 656, 2 cache elements apart). The one map gives
// every address; extents end at the row's last byte.
TEST(LayoutPerTile, DsMlaRowIs656Bytes) {
  std::string err;
  std::optional<kvgen::LayoutDesc> l = kvgen::parseLayout(
      "num_kv_heads = 1, components = [kv_c: 512, k_pe: 64], block_size = "
      "64, packing = packed, dtype = f8E4M3FN, scale = per_tile, "
      "kv_c_tile_scales = [128, 512], k_pe_dtype = bf16",
      &err);
  ASSERT_TRUE(l) << err;
  EXPECT_EQ(l->validate(), std::nullopt);
  EXPECT_EQ(l->span(0), 528);
  EXPECT_EQ(l->span(1), 128);
  EXPECT_EQ(l->rowWidth(0), 656);
  EXPECT_EQ(l->base(1), 528);
  EXPECT_EQ(l->strides(1).token, 656);
  EXPECT_EQ(l->strides(1).block, 64 * 656);
  kvgen::SideMap pe = l->map(1);
  EXPECT_EQ(pe.elem, 2);
  EXPECT_EQ(kvgen::elementOffset(pe, 3, 5, 0, 63),
            3 * 64 * 656 + 5 * 656 + 528 + 126);
  // Ten blocks: the last byte of the last row's rope is the extent.
  EXPECT_EQ(l->extentBytes(1, 10), 10 * 64 * 656);
  EXPECT_EQ(l->extentBytes(0, 10), 9 * 64 * 656 + 63 * 656 + 528);
  EXPECT_EQ(l->checkedExtentBytes(1, 10), 10 * 64 * 656);
  // The text round-trips.
  std::optional<kvgen::LayoutDesc> again =
      kvgen::parseLayout(kvgen::toString(*l), &err);
  ASSERT_TRUE(again) << err;
  EXPECT_EQ(*again, *l);
  // A row 8 bytes short of the scales and the rope overlaps the next one.
  kvgen::LayoutDesc narrow = *l;
  narrow.components[0].strides = kvgen::Strides{64 * 648, 648, 648};
  EXPECT_NE(narrow.validate(), std::nullopt);
}
