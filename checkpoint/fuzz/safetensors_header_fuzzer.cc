// checkpoint/fuzz/safetensors_header_fuzzer.cc — libFuzzer target for the safetensors header decoder
// (ParseSafetensorsHeader on an arbitrary file image; tools/fuzz.sh builds it with clang, ASan, UBSan).
// Invariant checked: it returns a header whose entries tile the data bytes exactly, or throws
// tessel::Error kDataLoss; anything else aborts the fuzzer.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "checkpoint/safetensors.h"
#include "core/base/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessel;
  using namespace tessel::checkpoint;
  try {
    const SafetensorsHeader h =
        ParseSafetensorsHeader(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
    int64_t pos = 0;
    for (const SafetensorsEntry& e : h.entries) {
      if (e.begin != pos || e.end < e.begin) std::abort();
      pos = e.end;
    }
    if (pos != h.file_size - h.data_start) std::abort();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kDataLoss) std::abort();
  }
  return 0;
}
