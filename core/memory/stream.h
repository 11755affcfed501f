// core/memory/stream.h — RAII streams and events over the installed DeviceBackend, and the thread's
// current stream per device (what CUDA kernels, copies and the caching allocator use).
//
// Invariant: a Stream or Event owns its handle and destroys it exactly once (move-only); the current
// stream of a device is per thread, defaults to the default stream (null handle), and a StreamGuard
// restores the previous one. Allocations are stream-ordered against CurrentStream(device)
// (caching_allocator.h): memory freed while a stream is current is reused only by allocations on that
// stream; cross-stream reuse is the caller's job with events (FSDP2's rule: the consumer records an
// event, the producer stream waits on it before its next allocation reuses the block; no record_stream).
//
// Example:
//   memory::Stream comm(Device::Cuda(0));
//   memory::Event ready(Device::Cuda(0));
//   { memory::StreamGuard g(comm); /* all-gather into a buffer allocated on `comm` */ ready.Record(comm); }
//   ready.Block(memory::CurrentStream(Device::Cuda(0)));   // compute waits for the all-gather
#pragma once

#include "core/memory/device_backend.h"
#include "core/tensor/device.h"

namespace tessel::memory {

class Stream {
 public:
  // A new non-default stream on `device` (REQUIRES: device.is_cuda(), a backend installed).
  explicit Stream(Device device);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Device device() const { return device_; }
  StreamHandle handle() const { return handle_; }
  void Synchronize() const;

 private:
  Device device_;
  StreamHandle handle_ = nullptr;
};

class Event {
 public:
  explicit Event(Device device);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  Device device() const { return device_; }
  // Captures the work queued so far on `stream` (a handle of this event's device).
  void Record(StreamHandle stream);
  void Record(const Stream& stream) { Record(stream.handle()); }
  bool Query() const;
  void Synchronize() const;
  // Makes `stream` wait (on the device, not the host) for the captured work.
  void Block(StreamHandle stream) const;
  void Block(const Stream& stream) const { Block(stream.handle()); }

 private:
  Device device_;
  EventHandle handle_ = nullptr;
};

// The thread's current stream on `device` (null = default stream).
StreamHandle CurrentStream(Device device);

// Makes `stream` current for its device on this thread while alive.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Device device_;
  StreamHandle previous_;
};

}  // namespace tessel::memory
