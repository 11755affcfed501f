// core/tensor/device_copy.cc — host<->device and device<->device copies over the DeviceBackend, with
// double-buffered pinned staging for large host<->device transfers; Tensor::To.
#include "core/tensor/device_copy.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>

#include "core/base/error.h"
#include "core/memory/device_backend.h"
#include "core/memory/stream.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

using memory::CopyKind;
using memory::DeviceBackend;
using memory::EventHandle;
using memory::StreamHandle;

// Two page-locked chunks and one event each, created on first use and kept for the process (freeing
// pinned memory synchronizes the whole device, so it is never done in the steady state). One large
// copy at a time uses them (the mutex); small copies never touch them.
struct PinnedStaging {
  std::mutex mu;
  int device = -1;  // events belong to one device; re-created if another device stages
  std::array<void*, 2> buffers{};
  std::array<EventHandle, 2> events{};
  std::array<bool, 2> pending{};
  int64_t bytes = 0;

  void Prepare(DeviceBackend& b, int dev) {
    for (int i = 0; i < 2; ++i) {
      if (buffers[i] == nullptr) {
        buffers[i] = b.MallocHost(kStagingChunkBytes);
        TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, buffers[i] != nullptr, "copy_: cannot allocate ",
                          kStagingChunkBytes, " bytes of pinned host memory for staging");
        bytes += kStagingChunkBytes;
      }
      if (device != dev && events[i] != nullptr) b.DestroyEvent(device, events[i]), events[i] = nullptr;
      if (events[i] == nullptr) events[i] = b.CreateEvent(dev);
      pending[i] = false;
    }
    device = dev;
  }
  // Waits until buffer i's previous async copy finished.
  void Drain(DeviceBackend& b, int i) {
    if (pending[i]) b.SynchronizeEvent(device, events[i]), pending[i] = false;
  }
};

PinnedStaging& Staging() {
  static auto* s = new PinnedStaging();
  return *s;
}

void HostToDevice(void* dst, const void* src, int64_t nbytes, Device device) {
  DeviceBackend& b = memory::RequireDeviceBackend("copy_", device.index);
  StreamHandle stream = memory::CurrentStream(device);
  if (nbytes < kPinnedStagingMinBytes) {
    b.MemcpyAsync(dst, src, nbytes, CopyKind::kHostToDevice, device.index, stream);
    b.SynchronizeStream(device.index, stream);
    return;
  }
  PinnedStaging& st = Staging();
  std::lock_guard<std::mutex> lock(st.mu);
  st.Prepare(b, device.index);
  int i = 0;
  for (int64_t off = 0; off < nbytes; off += kStagingChunkBytes, i ^= 1) {
    const int64_t n = std::min(kStagingChunkBytes, nbytes - off);
    st.Drain(b, i);  // the async copy out of this buffer two chunks ago must have read it
    std::memcpy(st.buffers[i], static_cast<const char*>(src) + off, n);
    b.MemcpyAsync(static_cast<char*>(dst) + off, st.buffers[i], n, CopyKind::kHostToDevice, device.index, stream);
    b.RecordEvent(device.index, st.events[i], stream);
    st.pending[i] = true;
  }
  st.Drain(b, 0);
  st.Drain(b, 1);
}

void DeviceToHost(void* dst, const void* src, int64_t nbytes, Device device) {
  DeviceBackend& b = memory::RequireDeviceBackend("copy_", device.index);
  StreamHandle stream = memory::CurrentStream(device);
  if (nbytes < kPinnedStagingMinBytes) {
    b.MemcpyAsync(dst, src, nbytes, CopyKind::kDeviceToHost, device.index, stream);
    b.SynchronizeStream(device.index, stream);
    return;
  }
  PinnedStaging& st = Staging();
  std::lock_guard<std::mutex> lock(st.mu);
  st.Prepare(b, device.index);
  // Chunk k lands in buffer k % 2; it is copied out to dst while chunk k + 1 is in flight.
  const int64_t num_chunks = (nbytes + kStagingChunkBytes - 1) / kStagingChunkBytes;
  auto enqueue = [&](int64_t k) {
    const int i = static_cast<int>(k % 2);
    const int64_t off = k * kStagingChunkBytes;
    b.MemcpyAsync(st.buffers[i], static_cast<const char*>(src) + off, std::min(kStagingChunkBytes, nbytes - off),
                  CopyKind::kDeviceToHost, device.index, stream);
    b.RecordEvent(device.index, st.events[i], stream);
    st.pending[i] = true;
  };
  enqueue(0);
  for (int64_t k = 0; k < num_chunks; ++k) {
    const int i = static_cast<int>(k % 2);
    st.Drain(b, i);
    if (k + 1 < num_chunks) enqueue(k + 1);
    const int64_t off = k * kStagingChunkBytes;
    std::memcpy(static_cast<char*>(dst) + off, st.buffers[i], std::min(kStagingChunkBytes, nbytes - off));
  }
}

std::string Describe(const Tensor& t) {
  return ShapeStr(t.sizes()) + " " + std::string(DTypeName(t.dtype())) + " on " + t.device().ToString() +
         (t.is_contiguous() ? "" : " (strided)");
}

// A contiguous host tensor of `dtype` and `sizes` holding src's values (broadcast, converted).
Tensor HostStaged(const Tensor& src, const Shape& sizes, DType dtype) {
  Tensor tmp = Empty(sizes, dtype, Device::Cpu(0));
  CopyInto(tmp, src);
  return tmp;
}

DeviceStridedCopy& StridedCopyHook() {
  static DeviceStridedCopy fn = nullptr;
  return fn;
}

// With a strided-copy kernel installed: the strided cases of CopyAcrossDevices through a contiguous device
// temporary (or directly, on one device). Returns false when the copy is not one of them.
bool TryStridedDeviceCopy(const Tensor& dst, const Tensor& src) {
  const DeviceStridedCopy fn = StridedCopyHook();
  if (fn == nullptr) return false;
  const bool dst_dev = !dst.device().is_cpu(), src_dev = !src.device().is_cpu();
  if (dst_dev && src_dev) {
    if (dst.device() != src.device()) return false;
    const bool memcpy = dst.dtype() == src.dtype() && src.sizes() == dst.sizes() && src.is_contiguous() &&
                        dst.is_contiguous();
    if (memcpy) return false;
    fn(dst, src);
    return true;
  }
  if (src_dev && (!src.is_contiguous() || src.sizes() != dst.sizes())) {  // device -> host: densify first
    Tensor tmp = Empty(dst.sizes(), src.dtype(), src.device());
    fn(tmp, src);
    CopyAcrossDevices(dst, tmp);
    return true;
  }
  if (dst_dev && !dst.is_contiguous()) {  // host -> strided device: land contiguous, then scatter
    Tensor tmp = Empty(dst.sizes(), dst.dtype(), dst.device());
    CopyAcrossDevices(tmp, src);
    fn(dst, tmp);
    return true;
  }
  return false;
}

}  // namespace

void SetDeviceStridedCopy(DeviceStridedCopy fn) { StridedCopyHook() = fn; }

void CopyAcrossDevices(const Tensor& dst, const Tensor& src) {
  if (TryStridedDeviceCopy(dst, src)) return;
  const int64_t nbytes = dst.numel() * ElementSize(dst.dtype());
  const bool same_layout = src.sizes() == dst.sizes() && src.dtype() == dst.dtype() && src.is_contiguous();
  if (src.device().is_cpu()) {  // host -> device
    TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, dst.is_contiguous(), "copy_: destination ", Describe(dst),
                      " is strided; host-to-device copies need a contiguous destination");
    if (same_layout) return HostToDevice(dst.raw_data(), src.raw_data(), nbytes, dst.device());
    const Tensor staged = HostStaged(src, dst.sizes(), dst.dtype());
    return HostToDevice(dst.raw_data(), staged.raw_data(), nbytes, dst.device());
  }
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, src.is_contiguous() && src.sizes() == dst.sizes(),
                    "copy_: from ", Describe(src), " to ", Describe(dst),
                    ": a device source must be contiguous and of the destination's shape (strided or broadcast "
                    "device copies need a CUDA copy kernel)");
  if (dst.device().is_cpu()) {  // device -> host
    if (same_layout && dst.is_contiguous()) {
      return DeviceToHost(dst.raw_data(), src.raw_data(), nbytes, src.device());
    }
    Tensor tmp = Empty(src.sizes(), src.dtype(), Device::Cpu(0));
    DeviceToHost(tmp.raw_data(), src.raw_data(), tmp.numel() * ElementSize(src.dtype()), src.device());
    return CopyInto(dst, tmp);
  }
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, same_layout && dst.is_contiguous(), "copy_: from ", Describe(src),
                    " to ", Describe(dst), ": device-to-device copies need equal dtypes and contiguous tensors");
  DeviceBackend& b = memory::RequireDeviceBackend("copy_", dst.device().index);
  if (src.device() != dst.device()) {
    // Order after src's producer; dst's stream then runs the copy.
    b.SynchronizeStream(src.device().index, memory::CurrentStream(src.device()));
  }
  b.MemcpyAsync(dst.raw_data(), src.raw_data(), nbytes, CopyKind::kDeviceToDevice, dst.device().index,
                memory::CurrentStream(dst.device()));
}

int64_t PinnedStagingBytes() {
  PinnedStaging& st = Staging();
  std::lock_guard<std::mutex> lock(st.mu);
  return st.bytes;
}

Tensor Tensor::To(Device device) const {
  TESSEL_CHECK(defined() && !is_distributed(), "to: needs a defined local tensor, got ", ToString());
  if (device == this->device()) return *this;
  Tensor out = Empty(sizes(), dtype(), device);
  CopyInto(out, *this);
  return out;
}

}  // namespace tessel
