// core/memory/stream.cc — Stream/Event RAII over the installed backend; per-thread current streams.
#include "core/memory/stream.h"

#include <array>
#include <utility>

#include "core/base/error.h"

namespace tessel::memory {
namespace {

constexpr int kMaxDevices = 16;
thread_local std::array<StreamHandle, kMaxDevices> current_streams{};

int CheckedIndex(Device device, const char* what) {
  TESSEL_CHECK(device.is_cuda(), what, ": streams exist on CUDA devices only, got ", device);
  TESSEL_CHECK(device.index >= 0 && device.index < kMaxDevices, what, ": device ", device, " out of range [0, ",
               kMaxDevices, ")");
  return device.index;
}

}  // namespace

Stream::Stream(Device device) : device_(device) {
  const int i = CheckedIndex(device, "Stream");
  handle_ = RequireDeviceBackend("Stream", i).CreateStream(i);
}

Stream::~Stream() {
  if (handle_ != nullptr) GetDeviceBackend()->DestroyStream(device_.index, handle_);
}

Stream::Stream(Stream&& other) noexcept : device_(other.device_), handle_(std::exchange(other.handle_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) GetDeviceBackend()->DestroyStream(device_.index, handle_);
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void Stream::Synchronize() const { GetDeviceBackend()->SynchronizeStream(device_.index, handle_); }

Event::Event(Device device) : device_(device) {
  const int i = CheckedIndex(device, "Event");
  handle_ = RequireDeviceBackend("Event", i).CreateEvent(i);
}

Event::~Event() {
  if (handle_ != nullptr) GetDeviceBackend()->DestroyEvent(device_.index, handle_);
}

Event::Event(Event&& other) noexcept : device_(other.device_), handle_(std::exchange(other.handle_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) GetDeviceBackend()->DestroyEvent(device_.index, handle_);
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void Event::Record(StreamHandle stream) {
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, handle_ != nullptr, "Event::Record: moved-from event");
  GetDeviceBackend()->RecordEvent(device_.index, handle_, stream);
}
bool Event::Query() const { return GetDeviceBackend()->QueryEvent(device_.index, handle_); }
void Event::Synchronize() const { GetDeviceBackend()->SynchronizeEvent(device_.index, handle_); }
void Event::Block(StreamHandle stream) const { GetDeviceBackend()->StreamWaitEvent(device_.index, stream, handle_); }

StreamHandle CurrentStream(Device device) { return current_streams[CheckedIndex(device, "CurrentStream")]; }

StreamGuard::StreamGuard(const Stream& stream)
    : device_(stream.device()), previous_(current_streams[CheckedIndex(stream.device(), "StreamGuard")]) {
  current_streams[device_.index] = stream.handle();
}

StreamGuard::~StreamGuard() { current_streams[device_.index] = previous_; }

}  // namespace tessel::memory
