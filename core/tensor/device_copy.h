// core/tensor/device_copy.h — copies between host and device memory, the device half of CopyInto
// (copy.h calls CopyAcrossDevices whenever either side is not a CPU tensor) and Tensor::To(device).
//
// Invariant: returns only when dst holds src's values and src may be reused by the caller (copies
// that touch host memory are synchronous with the host, like torch's non_blocking=False; device to
// device copies are stream-ordered on dst's current stream, after src's current stream if the devices
// differ). Host<->device copies of at least kPinnedStagingMinBytes go through page-locked staging
// buffers in kStagingChunkBytes chunks, double-buffered: a buffer is refilled only after the event
// recorded behind its previous async copy completed. dtype conversion, broadcasting and strided
// layouts are handled on the host side; on the device side both tensors must be contiguous and of one
// dtype unless a device strided copy is installed (SetDeviceStridedCopy below: it handles strided and
// broadcast layouts and device-side dtype conversion); without it such copies fail with kUnimplemented
// naming the op and devices.
//
// Example:
//   Tensor w_gpu = w.To(Device::Cuda(0));     // host -> device through pinned staging if large
//   Tensor back = w_gpu.To(Device::Cpu());    // device -> host
#pragma once

#include <cstdint>

#include "core/tensor/tensor.h"

namespace tessel {

inline constexpr int64_t kPinnedStagingMinBytes = int64_t{1} << 20;
inline constexpr int64_t kStagingChunkBytes = int64_t{4} << 20;

// REQUIRES: dst.device() or src.device() is not CPU; shapes already checked broadcastable by CopyInto.
void CopyAcrossDevices(const Tensor& dst, const Tensor& src);

// Bytes of page-locked host memory held by the staging buffers (0 until the first large copy).
int64_t PinnedStagingBytes();

// A device-side copy dst = src for tensors of one device, dst of any strides and src of any strides
// broadcasting to dst's shape, enqueued on dst's current stream; when the dtypes differ it converts (the
// CUDA one: between float32, bfloat16 and bool, else kUnimplemented naming both dtypes). A device kernel
// library installs it at static initialization (the CUDA one: //core/ops:view_cuda); with one installed,
// CopyAcrossDevices
// also copies strided tensors between host and device through a contiguous device temporary. Without one
// those copies fail with kUnimplemented as described above.
using DeviceStridedCopy = void (*)(const Tensor& dst, const Tensor& src);
void SetDeviceStridedCopy(DeviceStridedCopy fn);

}  // namespace tessel
