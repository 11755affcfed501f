// core/tensor/device.cc — Device printing and the thread-local current device.
#include "core/tensor/device.h"

namespace tessel {
namespace {
thread_local Device current_device = Device::Cpu(0);
}  // namespace

std::string Device::ToString() const { return (is_cpu() ? "cpu:" : "cuda:") + std::to_string(index); }

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.ToString(); }

Device CurrentDevice() { return current_device; }

DeviceGuard::DeviceGuard(Device device) : previous_(current_device) { current_device = device; }
DeviceGuard::~DeviceGuard() { current_device = previous_; }

}  // namespace tessel
