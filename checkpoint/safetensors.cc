// checkpoint/safetensors.cc — safetensors header encoding and strict decoding (nlohmann::json).
#include "checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/base/error.h"

namespace tessel::checkpoint {
namespace {

// The reference implementation refuses headers above 100 MB; so do we (a corrupt length must not make
// us allocate gigabytes).
constexpr int64_t kMaxHeaderBytes = 100'000'000;

struct DTypeName {
  std::string_view name;
  int64_t size;
};
constexpr DTypeName kAllNames[] = {{"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
                                   {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
                                   {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};

[[noreturn]] void Corrupt(const std::string& path, std::string_view what) {
  TESSEL_FAIL(ErrorCode::kDataLoss, "safetensors: '", path, "' is not a valid safetensors file: ", what);
}

SafetensorsEntry ParseEntry(const std::string& path, const std::string& name, const nlohmann::json& v) {
  if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets")) {
    Corrupt(path, "tensor '" + name + "' needs dtype, shape and data_offsets");
  }
  SafetensorsEntry e;
  e.name = name;
  const auto& dt = v.at("dtype");
  const auto& shape = v.at("shape");
  const auto& off = v.at("data_offsets");
  if (!dt.is_string() || !SafetensorsElementSize(dt.get<std::string>())) {
    Corrupt(path, "tensor '" + name + "' has an unknown dtype " + dt.dump());
  }
  e.dtype = dt.get<std::string>();
  if (!shape.is_array()) Corrupt(path, "tensor '" + name + "' has a non-array shape");
  // Values above INT64_MAX would turn negative in int64: corrupt, like any other impossible size.
  auto fits = [](const nlohmann::json& x) {
    return x.is_number_unsigned() && x.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX);
  };
  for (const auto& s : shape) {
    if (!fits(s)) Corrupt(path, "tensor '" + name + "' has a bad shape " + shape.dump());
    e.shape.push_back(s.get<int64_t>());
  }
  if (!off.is_array() || off.size() != 2 || !fits(off[0]) || !fits(off[1])) {
    Corrupt(path, "tensor '" + name + "' has bad data_offsets " + off.dump());
  }
  e.begin = off[0].get<int64_t>();
  e.end = off[1].get<int64_t>();
  int64_t want = 0;
  try {
    want = NumBytes(e.shape, *SafetensorsElementSize(e.dtype));
  } catch (const Error& err) {
    Corrupt(path, Str("tensor '", name, "': ", err.what()));
  }
  if (e.end < e.begin || e.end - e.begin != want) {
    Corrupt(path, Str("tensor '", name, "' spans ", e.end - e.begin, " bytes but ", e.dtype, " ", ShapeStr(e.shape),
                      " needs ", want));
  }
  return e;
}

// Entries must tile [0, data_bytes) exactly, as the reference implementation requires.
void CheckTiling(const std::string& path, const std::vector<SafetensorsEntry>& entries, int64_t data_bytes) {
  int64_t pos = 0;
  for (const SafetensorsEntry& e : entries) {
    if (e.begin != pos) {
      Corrupt(path, Str("tensor '", e.name, "' starts at data byte ", e.begin, " but the previous tensor ends at ", pos,
                        " (gap or overlap)"));
    }
    pos = e.end;
  }
  TESSEL_CHECK_CODE(ErrorCode::kDataLoss, pos == data_bytes, "safetensors: '", path, "' is ",
                    pos > data_bytes ? "truncated" : "longer than its header says", ": the header indexes ", pos,
                    " data bytes but the file holds ", data_bytes);
}

}  // namespace

const SafetensorsEntry* SafetensorsHeader::Find(std::string_view name) const {
  for (const SafetensorsEntry& e : entries) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

std::string_view SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "F32";
    case DType::kFloat64:
      return "F64";
    case DType::kBFloat16:
      return "BF16";
    case DType::kFloat16:
      return "F16";
    case DType::kInt64:
      return "I64";
    case DType::kInt32:
      return "I32";
    case DType::kBool:
      return "BOOL";
    case DType::kUInt8:
      return "U8";
    case DType::kInt8:
      return "I8";
    case DType::kInt16:
      return "I16";
  }
  TESSEL_INTERNAL_ASSERT(false, "unknown dtype");
}

std::optional<DType> DTypeFromSafetensors(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto d = static_cast<DType>(i);
    if (SafetensorsDTypeName(d) == name) return d;
  }
  return std::nullopt;
}

std::optional<int64_t> SafetensorsElementSize(std::string_view name) {
  for (const DTypeName& d : kAllNames) {
    if (d.name == name) return d.size;
  }
  return std::nullopt;
}

std::string EncodeSafetensorsHeader(std::vector<SafetensorsEntry>& entries,
                                    const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata.empty()) j["__metadata__"] = metadata;
  int64_t pos = 0;
  for (SafetensorsEntry& e : entries) {
    const std::optional<int64_t> elem = SafetensorsElementSize(e.dtype);
    TESSEL_INTERNAL_ASSERT(elem.has_value(), "unknown safetensors dtype ", e.dtype);
    TESSEL_CHECK(!j.contains(e.name), "safetensors: duplicate tensor name '", e.name, "'");
    e.begin = pos;
    e.end = pos + NumElements(e.shape) * *elem;
    pos = e.end;
    j[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  }
  std::string header = j.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header;
}

namespace {

// The header length from the first 8 bytes (little-endian), checked against the file size.
int64_t HeaderLength(const std::string& path, const unsigned char* len_bytes, int64_t file_size) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > static_cast<uint64_t>(std::min(kMaxHeaderBytes, file_size - 8))) {
    Corrupt(path, Str("header length ", n, " exceeds the file (", file_size, " bytes) or the 100 MB limit"));
  }
  return static_cast<int64_t>(n);
}

// Decodes the JSON header `text`; h.file_size and h.data_start are set.
void DecodeHeader(const std::string& path, const std::string& text, SafetensorsHeader& h) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) Corrupt(path, "the header is not a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) Corrupt(path, "__metadata__ is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) Corrupt(path, "__metadata__ value of '" + mk + "' is not a string");
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    h.entries.push_back(ParseEntry(path, key, value));
  }
  std::stable_sort(h.entries.begin(), h.entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  CheckTiling(path, h.entries, h.file_size - h.data_start);
}

}  // namespace

SafetensorsHeader ReadSafetensorsHeader(const File& file) {
  const std::string& path = file.path();
  SafetensorsHeader h;
  h.file_size = file.Size();
  if (h.file_size < 8) Corrupt(path, Str("the file has ", h.file_size, " bytes, fewer than the 8-byte length"));
  unsigned char len_bytes[8];
  file.ReadAt(0, len_bytes, 8);
  const int64_t n = HeaderLength(path, len_bytes, h.file_size);
  std::string text(static_cast<size_t>(n), '\0');
  file.ReadAt(8, text.data(), n);
  h.data_start = 8 + n;
  DecodeHeader(path, text, h);
  return h;
}

SafetensorsHeader ParseSafetensorsHeader(std::string_view file_bytes, const std::string& path) {
  SafetensorsHeader h;
  h.file_size = static_cast<int64_t>(file_bytes.size());
  if (h.file_size < 8) Corrupt(path, Str("the file has ", h.file_size, " bytes, fewer than the 8-byte length"));
  const int64_t n = HeaderLength(path, reinterpret_cast<const unsigned char*>(file_bytes.data()), h.file_size);
  h.data_start = 8 + n;
  DecodeHeader(path, std::string(file_bytes.substr(8, static_cast<size_t>(n))), h);
  return h;
}

}  // namespace tessel::checkpoint
