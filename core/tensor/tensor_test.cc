#include "core/tensor/tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/base/error.h"
#include "core/base/testing/expect_error.h"
#include "core/memory/allocator.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

TEST(TensorTest, HandleCopiesAreShallow) {
  Tensor a = Zeros({2, 3});
  Tensor b = a;
  b.data_ptr<float>()[4] = 7;
  EXPECT_EQ(a.ToVector<float>()[4], 7);
  EXPECT_TRUE(a.is_same(b));
}

TEST(TensorTest, FactoriesFillValuesAndDtypes) {
  EXPECT_EQ(Full({2}, 2.5, DType::kBFloat16).ToVector<double>(), (std::vector<double>{2.5, 2.5}));
  EXPECT_EQ(Arange(0, 10, 3, DType::kInt32).ToVector<int>(), (std::vector<int>{0, 3, 6, 9}));
  EXPECT_EQ(FromVector<float>({1, 2, 3, 4}, {2, 2}).sizes(), (Shape{2, 2}));
  EXPECT_EQ(Scalar(3).dim(), 0);
  EXPECT_EQ(Scalar(3).item<float>(), 3);
  // the contiguous fill converts the value once as CopyInto does: truncation, bools, 16-bit rounding
  EXPECT_EQ(Full({70000}, -2.7, DType::kInt32).ToVector<int>(), std::vector<int>(70000, -2));
  EXPECT_EQ(Full({3}, 0.5, DType::kBool).ToVector<int>(), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(Full({2}, 257.0, DType::kBFloat16).ToVector<double>(), (std::vector<double>{256.0, 256.0}));
  Tensor strided = MakeView(Zeros({4, 4}), {4, 2}, {4, 2}, 0);  // every other column: the broadcast copy
  FillInPlace(strided, 3.0);
  EXPECT_EQ(strided.ToVector<double>(), std::vector<double>(8, 3.0));
}

// FillInPlace's contiguous path stores the value converted once; the strided path broadcasts a float64 0-d tensor
// through CopyInto. Both must give the same bytes for every dtype and value (rounding, truncation, signed zeros,
// bools), one version bump each, and the parallel fill covers every element of a large tensor.
TEST(TensorTest, ContiguousFillEqualsTheBroadcastCopyBitForBit) {
  const double values[] = {0.0, -0.0, 1.0 / 3, -2.7, 257.0, 65504.0, 1e30, -1e-30, 0.5, 3.0e9, -129.0};
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16, DType::kInt64, DType::kInt32,
                   DType::kInt16, DType::kInt8, DType::kUInt8, DType::kBool}) {
    for (double v : values) {
      if (!IsFloating(dt) && dt != DType::kBool && (std::abs(v) > 1e9 || v < 0) && dt != DType::kInt64) continue;
      Tensor dense = Empty({5}, dt);
      FillInPlace(dense, v);
      Tensor wide = Empty({5, 2}, dt);
      Tensor strided = MakeView(wide, {5}, {2}, 0);  // not contiguous: the CopyInto path
      FillInPlace(strided, v);
      EXPECT_EQ(dense.impl()->version(), 1u);
      const auto* a = static_cast<const unsigned char*>(dense.raw_data());
      const auto* b = static_cast<const unsigned char*>(wide.raw_data());
      const int64_t es = ElementSize(dt);
      for (int64_t i = 0; i < 5; ++i) {
        EXPECT_EQ(std::memcmp(a + i * es, b + 2 * i * es, es), 0) << dt << " value " << v << " element " << i;
      }
    }
  }
  Tensor big = Empty({300001}, DType::kFloat32);
  FillInPlace(big, 1.5);
  const std::vector<float> got = big.ToVector<float>();
  EXPECT_EQ(std::count(got.begin(), got.end(), 1.5f), 300001);
}

TEST(TensorTest, CopyIntoConvertsDtypesAndStrides) {
  Tensor src = FromVector<float>({1.5f, -2.7f, 3, 4, 5, 6}, {2, 3});
  // Transposed view of src as [3, 2].
  Tensor tview = MakeView(src, {3, 2}, {1, 3}, 0);
  EXPECT_FALSE(tview.is_contiguous());
  Tensor dst = Empty({3, 2}, DType::kInt64);
  CopyInto(dst, tview);
  EXPECT_EQ(dst.ToVector<int64_t>(), (std::vector<int64_t>{1, 4, -2, 5, 3, 6}));
  Tensor b = Empty({3, 2}, DType::kBool);
  CopyInto(b, Full({3, 2}, 0.25));
  EXPECT_EQ(b.ToVector<int>(), (std::vector<int>(6, 1)));
}

// Transposes of every element size through the tiled path (uneven tiles, an outer dim, the unit-stride dim
// in the middle), against an index loop.
TEST(TensorTest, CopyIntoMaterializesTransposesOfEveryElementSize) {
  for (DType dt : {DType::kUInt8, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dt));
    const int64_t a = 9, b = 37, c = 45;  // src [a, b, c] contiguous; view [a, c, b] and [c, b, a]
    std::vector<double> v(static_cast<size_t>(a * b * c));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i % 251);
    const Tensor src = FromDoubles(v, Shape{a, b, c}, dt);
    Tensor dst = Empty({a, c, b}, dt);
    CopyInto(dst, MakeView(src, {a, c, b}, {b * c, 1, c}, 0));
    std::vector<double> want;
    for (int64_t i = 0; i < a; ++i) {
      for (int64_t k = 0; k < c; ++k) {
        for (int64_t j = 0; j < b; ++j) want.push_back(v[static_cast<size_t>((i * b + j) * c + k)]);
      }
    }
    EXPECT_EQ(dst.ToVector<double>(), want);
    Tensor dst2 = Empty({c, b, a}, dt);  // the unit-stride dim first, the last dim strided by b * c
    CopyInto(dst2, MakeView(src, {c, b, a}, {1, c, b * c}, 0));
    want.clear();
    for (int64_t k = 0; k < c; ++k) {
      for (int64_t j = 0; j < b; ++j) {
        for (int64_t i = 0; i < a; ++i) want.push_back(v[static_cast<size_t>((i * b + j) * c + k)]);
      }
    }
    EXPECT_EQ(dst2.ToVector<double>(), want);
  }
}

// Integers above 2^53 read back exactly (they went through doubles: 2^62 + 1 read 2^62).
TEST(TensorTest, ToVectorOfIntegersIsExactForEveryInt64) {
  const std::vector<int64_t> big{(int64_t{1} << 62) + 1, -((int64_t{1} << 62) + 3), 5563223723724791344};
  EXPECT_EQ(FromVector<int64_t>(big).ToVector<int64_t>(), big);
  EXPECT_EQ(FromVector<int32_t>({2147483647, -7}).ToVector<int32_t>(), (std::vector<int32_t>{2147483647, -7}));
  EXPECT_EQ(FromVector<float>({1.5f, -2.0f}).ToVector<float>(), (std::vector<float>{1.5f, -2.0f}));
}

TEST(TensorTest, CopyIntoBroadcastsAndRejectsBadShapes) {
  Tensor dst = Zeros({2, 3});
  CopyInto(dst, FromVector<float>({1, 2, 3}, {3}));
  EXPECT_EQ(dst.ToVector<float>(), (std::vector<float>{1, 2, 3, 1, 2, 3}));
  try {
    CopyInto(dst, Zeros({4}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("copy_"), std::string::npos);
  }
}

TEST(TensorTest, AllocationsAreCountedOnTheCurrentDeviceAndLedger) {
  DeviceGuard g(Device::Cpu(50));
  const int64_t before = memory::Stats(Device::Cpu(50))[memory::Ledger::kParams].live;
  {
    memory::LedgerScope s(memory::Ledger::kParams);
    Tensor t = Zeros({256});
    EXPECT_EQ(t.device(), Device::Cpu(50));
    EXPECT_EQ(memory::Stats(Device::Cpu(50))[memory::Ledger::kParams].live - before, 1024);
  }
  EXPECT_EQ(memory::Stats(Device::Cpu(50))[memory::Ledger::kParams].live, before);
}

// A parameter whose storage is replaced (Module.to's `p.data = p.data.half()`) keeps its bytes in the params
// ledger, and a gradient assigned by hand is counted as grads: both stayed in the ledger they were made under.
TEST(TensorTest, ReplacedParameterStorageAndAssignedGradientsKeepTheirLedgers) {
  DeviceGuard g(Device::Cpu(51));
  auto live = [](memory::Ledger l) { return memory::Stats(Device::Cpu(51))[l].live; };
  Tensor p;
  {
    memory::LedgerScope s(memory::Ledger::kParams);
    p = Zeros({256});
  }
  const int64_t params = live(memory::Ledger::kParams), other = live(memory::Ledger::kOther);
  p.impl()->SetDataFrom(*Zeros({128}, DType::kBFloat16).impl(), /*as_data=*/true);
  EXPECT_EQ(live(memory::Ledger::kParams) - params, 256 - 1024);
  EXPECT_EQ(live(memory::Ledger::kOther), other);
  const int64_t grads = live(memory::Ledger::kGrads);
  Tensor q = Zeros({64});
  q.set_grad(Zeros({64}));
  EXPECT_EQ(live(memory::Ledger::kGrads) - grads, 256);
}

TEST(TensorTest, DataPtrChecksDtypeAndItemChecksNumel) {
  Tensor t = Zeros({2});
  using testing::ExpectErrorContains;
  ExpectErrorContains([&] { t.data_ptr<double>(); }, ErrorCode::kInvalidArgument, {"data_ptr", "float64"});
  ExpectErrorContains([&] { t.item<float>(); }, ErrorCode::kInvalidArgument, {"item", "[2]"});
  ExpectErrorContains([&] { (void)Tensor().sizes(); }, ErrorCode::kFailedPrecondition, "undefined Tensor");
}

TEST(TensorTest, RequiresGradOnlyForFloatingLeaves) {
  Tensor t = Zeros({2});
  t.set_requires_grad(true);
  EXPECT_TRUE(t.requires_grad());
  EXPECT_TRUE(t.is_leaf());
  testing::ExpectErrorContains([] { Zeros({2}, DType::kInt64).set_requires_grad(true); }, ErrorCode::kInvalidArgument,
                               "set_requires_grad: only floating tensors can require gradients, got int64");
  Tensor d = Detach(t);
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.raw_data(), t.raw_data());
}

TEST(TensorOverflowTest, EmptyOfAnOverflowingShapeRaisesBeforeAllocating) {
  const int64_t before = memory::Stats(Device::Cpu()).total.live;
  testing::ExpectErrorContains([] { Empty({(int64_t{1} << 62) + 1, 256}); }, ErrorCode::kInvalidArgument,
                               {"[4611686018427387905, 256]", "overflows int64"});
  // Fits in elements, not in bytes (2^62 float32 = 2^64 bytes).
  testing::ExpectErrorContains([] { Zeros({int64_t{1} << 62}); }, ErrorCode::kInvalidArgument, "4-byte elements");
  EXPECT_EQ(memory::Stats(Device::Cpu()).total.live, before);
}

TEST(TensorOverflowTest, FromBufferAndArangeRejectOverflowingSizes) {
  float x = 0;
  testing::ExpectErrorContains([&] { FromBuffer(&x, 4, std::vector<int64_t>{int64_t{1} << 62, 8}, DType::kFloat32); },
                               ErrorCode::kInvalidArgument, "overflows int64");
  testing::ExpectErrorContains([] { Arange(0, 1e300, 1); }, ErrorCode::kInvalidArgument, "arange:");
}

TEST(TensorOverflowTest, ViewOutsideItsStorageIsRejected) {
  Tensor t = Zeros({4});
  testing::ExpectErrorContains([&] { MakeView(t, {3}, {2}, 0); }, ErrorCode::kInvalidArgument,
                               {"shape [3] strides [2]", "outside a storage of 16 bytes"});
  testing::ExpectErrorContains([&] { MakeView(t, {2, int64_t{1} << 62}, {int64_t{1} << 62, 2}, 0); },
                               ErrorCode::kInvalidArgument, "overflows int64");
  EXPECT_EQ(MakeView(t, {2}, {2}, 1).numel(), 2);  // elements 1 and 3: inside
}

// Found by core/tensor/fuzz/tensor_factory_fuzzer.cc (UBSan: "load of value 255 ... for type bool").
TEST(TensorOverflowTest, FromBufferNormalizesBoolBytes) {
  const unsigned char raw[4] = {0, 1, 255, 2};
  Tensor t = FromBuffer(raw, 4, std::vector<int64_t>{4}, DType::kBool);
  const auto* b = static_cast<const unsigned char*>(t.raw_data());
  EXPECT_EQ((std::vector<int>{b[0], b[1], b[2], b[3]}), (std::vector<int>{0, 1, 1, 1}));
  EXPECT_EQ(t.ToDoubleVector(), (std::vector<double>{0, 1, 1, 1}));
}

}  // namespace
}  // namespace tessel
