// core/tensor/factory.cc — tensor factories.
#include "core/tensor/factory.h"

#include <algorithm>
#include <cmath>

#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/memory/device_backend.h"
#include "core/memory/stream.h"
#include "core/tensor/copy.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {

namespace {
thread_local bool deferred_init = false;
}  // namespace

Tensor Empty(std::span<const int64_t> shape, DType dtype, Device device) {
  for (int64_t s : shape) TESSEL_CHECK(s >= 0, "empty: negative size in shape ", ShapeStr(shape));
  Shape sizes(shape.begin(), shape.end());
  Storage storage = Storage::Allocate(NumBytes(sizes, ElementSize(dtype)), device);  // overflow-checked
  if (deferred_init) storage.set_deferred_init(true);
  Shape strides = ContiguousStrides(sizes);
  return MakeDense(std::move(storage), std::move(sizes), std::move(strides), 0, dtype);
}

void FillInPlace(const Tensor& t, double value) {
  TESSEL_CHECK(!t.is_distributed(), "fill_: FillInPlace works on local tensors");
  if (t.numel() == 0) {  // one version bump per write, as torch's (CopyInto bumps it below)
    t.impl()->storage().BumpVersion();
    return;
  }
  if (t.device().is_cpu() && t.is_contiguous()) {
    // The value converted once as CopyInto converts a double (ConvertValue), then stored: no 0-d float64 tensor
    // and broadcast copy per fill (torch.tensor(0.), zeros, ones, full, every Python number an op takes).
    t.impl()->storage().BumpVersion();  // one bump per write, as CopyInto's
    TESSEL_DISPATCH_ALL_TYPES(t.dtype(), "fill_", [&] {
      const scalar_t v = ConvertValue<scalar_t>(value);
      scalar_t* p = static_cast<scalar_t*>(t.raw_data());
      ParallelFor(0, t.numel(), int64_t{1} << 16, [&](int64_t b, int64_t e) { std::fill(p + b, p + e, v); });
    });
    return;
  }
  // The scalar is written on the host; CopyInto broadcasts it (and moves it to the device for CUDA).
  Tensor one = Empty({}, DType::kFloat64, t.device().is_cpu() ? t.device() : Device::Cpu(0));
  *one.data_ptr<double>() = value;
  CopyInto(t, one);
}

bool DeferredInitEnabled() { return deferred_init; }
bool SetDeferredInit(bool enabled) {
  const bool previous = deferred_init;
  deferred_init = enabled;
  return previous;
}
DeferredInitGuard::DeferredInitGuard(bool enabled) : previous_(SetDeferredInit(enabled)) {}
DeferredInitGuard::~DeferredInitGuard() { SetDeferredInit(previous_); }

Tensor Full(std::span<const int64_t> shape, double value, DType dtype, Device device) {
  Tensor t = Empty(shape, dtype, device);
  if (!deferred_init) FillInPlace(t, value);
  ResetVersionIfUnshared(t);  // torch's factories return version 0
  return t;
}

Tensor Zeros(std::span<const int64_t> shape, DType dtype, Device device) {
  Tensor t = Empty(shape, dtype, device);
  if (t.numel() == 0 || deferred_init) return t;
  if (device.is_cpu()) {
    std::memset(t.raw_data(), 0, t.numel() * ElementSize(dtype));
  } else {
    memory::RequireDeviceBackend("zeros", device.index)
        .MemsetAsync(t.raw_data(), 0, t.numel() * ElementSize(dtype), device.index, memory::CurrentStream(device));
  }
  return t;
}

Tensor Ones(std::span<const int64_t> shape, DType dtype, Device device) { return Full(shape, 1.0, dtype, device); }

Tensor Scalar(double value, DType dtype, Device device) {
  Tensor t = Empty(std::span<const int64_t>(), dtype, device);
  FillInPlace(t, value);
  ResetVersionIfUnshared(t);
  return t;
}

Tensor Arange(double start, double end, double step, DType dtype, Device device) {
  TESSEL_CHECK(step != 0, "arange: step must be nonzero");
  if (!device.is_cpu()) return Arange(start, end, step, dtype, Device::Cpu(0)).To(device);
  const double count = std::ceil((end - start) / step);
  TESSEL_CHECK(std::isfinite(count) && count < 9.2e18, "arange: [", start, ", ", end, ") with step ", step,
               " has ", count, " elements (more than 2^63-1, or not a number)");
  const int64_t n = std::max<int64_t>(0, static_cast<int64_t>(count));
  Tensor d = Empty({n}, DType::kFloat64, device);
  double* p = d.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = start + i * step;
  if (dtype == DType::kFloat64) return d;
  Tensor out = Empty({n}, dtype, device);
  CopyInto(out, d);
  ResetVersionIfUnshared(out);
  return out;
}

Tensor FromBuffer(const void* data, int64_t nbytes, std::span<const int64_t> shape, DType dtype, Device device) {
  const int64_t want = NumBytes(shape, ElementSize(dtype));
  TESSEL_CHECK(nbytes == want, "from_buffer: ", nbytes, " bytes given for shape ", ShapeStr(shape), " of ", dtype,
               " (needs ", want, ")");
  if (!device.is_cpu()) return FromBuffer(data, nbytes, shape, dtype, Device::Cpu(0)).To(device);
  Tensor t = Empty(shape, dtype, device);
  if (nbytes > 0) std::memcpy(t.raw_data(), data, nbytes);
  if (dtype == DType::kBool) {
    // Only 0 and 1 are valid bool bytes (reading any other is undefined behaviour; found by
    // core/tensor/fuzz/tensor_factory_fuzzer.cc): nonzero means true, as in numpy and torch.
    auto* b = static_cast<unsigned char*>(t.raw_data());
    for (int64_t i = 0; i < nbytes; ++i) b[i] = b[i] != 0;
  }
  return t;
}

Tensor FromDoubles(const std::vector<double>& values, std::span<const int64_t> shape, DType dtype) {
  Tensor d = FromBuffer(values.data(), static_cast<int64_t>(values.size() * sizeof(double)), shape, DType::kFloat64);
  if (dtype == DType::kFloat64) return d;
  Tensor out = Empty(shape, dtype);
  CopyInto(out, d);
  ResetVersionIfUnshared(out);
  return out;
}

}  // namespace tessel
