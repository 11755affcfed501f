// core/tensor/device.h — where a tensor lives: CPU or CUDA plus an index.
//
// Invariant: a CPU device's index is a *memory-accounting slot*, not a different address space: the
// threads backend runs rank r with `DeviceGuard(Device::Cpu(r))` so the memory ledger reports per rank.
// CPU kernels ignore the index; CUDA kernels use it as the GPU ordinal.
//
// Example:
//   DeviceGuard g(Device::Cpu(2));          // tensors made on this thread now count against cpu:2
//   Tensor t = Zeros({4});                  // t.device() == Device::Cpu(2)
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace tessel {

enum class DeviceType : uint8_t { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  static Device Cpu(int index = 0) { return {DeviceType::kCpu, index}; }
  static Device Cuda(int index = 0) { return {DeviceType::kCuda, index}; }
  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  std::string ToString() const;  // "cpu:0", "cuda:1"
  friend bool operator==(const Device& a, const Device& b) { return a.type == b.type && a.index == b.index; }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

std::ostream& operator<<(std::ostream& os, const Device& d);

// The device new tensors are created on by this thread (default cpu:0).
Device CurrentDevice();

// Scoped override of CurrentDevice() for this thread.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  Device previous_;
};

}  // namespace tessel
