// core/tensor/fuzz/tensor_factory_fuzzer.cc — libFuzzer target for the tensor factories and views
// (tools/fuzz.sh builds it with clang, ASan and UBSan; not a Bazel target).
//
// Input: [dtype byte][ndim byte][ndim x int64 sizes][ndim x int64 strides][int64 offset][payload...].
// Invariant checked: Empty/FromBuffer/MakeView either succeed, with every element readable (ASan sees
// an out-of-bounds view), or throw tessel::Error kInvalidArgument; anything else (a crash, another
// code, another exception) aborts the fuzzer. Allocations above 1 MiB are skipped (their size
// arithmetic still runs through NumBytes).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/base/error.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace {

struct Reader {
  const uint8_t* p;
  size_t n;
  template <typename T>
  T Take() {
    T v{};
    const size_t k = n < sizeof(T) ? n : sizeof(T);
    std::memcpy(&v, p, k);
    p += k, n -= k;
    return v;
  }
};

void Run(Reader& in) {
  using namespace tessel;
  const DType dtype = static_cast<DType>(in.Take<uint8_t>() % kNumDTypes);
  const size_t ndim = in.Take<uint8_t>() % 6;
  Shape sizes(ndim), strides(ndim);
  for (auto& s : sizes) s = in.Take<int64_t>() % 4096 * (in.Take<uint8_t>() > 250 ? INT64_C(1) << 40 : 1);
  for (auto& s : strides) s = in.Take<int64_t>() % 100000;
  const int64_t offset = in.Take<int64_t>() % 100000;
  int64_t nbytes = 0;
  try {
    nbytes = NumBytes(sizes, ElementSize(dtype));
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument) std::abort();
    return;
  }
  if (nbytes > (int64_t{1} << 20)) return;
  std::vector<uint8_t> payload(static_cast<size_t>(nbytes));
  const size_t copy = std::min(payload.size(), in.n);
  if (copy > 0) std::memcpy(payload.data(), in.p, copy);
  Tensor t = FromBuffer(payload.data(), nbytes, sizes, dtype);
  if (t.numel() > 0 && t.numel() < 4096) (void)t.ToDoubleVector();
  // A view with fuzzed strides and offset over the same storage: rejected, or every element inside.
  Tensor flat = FromBuffer(payload.data(), nbytes, Shape{t.numel()}, dtype);
  Shape view_sizes = sizes;
  for (auto& s : view_sizes) s = s % 64;
  Tensor v = MakeView(flat, view_sizes, strides, offset);
  if (v.numel() > 0 && v.numel() < 4096) (void)v.ToDoubleVector();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in{data, size};
  try {
    Run(in);
  } catch (const tessel::Error& e) {
    if (e.code() != tessel::ErrorCode::kInvalidArgument) std::abort();
  }
  return 0;
}
