// checkpoint/safetensors.h — the safetensors format (Hugging Face's public weights format): header
// encode/decode and dtype names. Every checkpoint data file is a safetensors file, and export/import
// speak it.
//
// Format: 8-byte little-endian header length N; N bytes of UTF-8 JSON (an object: tensor name →
// {"dtype", "shape", "data_offsets": [begin, end]}, plus an optional "__metadata__" object of string
// → string), padded with spaces; then the raw little-endian, row-major data. Offsets are relative to the
// first data byte; the tensors must tile the data region exactly (no gaps, no overlaps).
//
// Invariant: EncodeSafetensorsHeader produces a header that DecodeSafetensorsHeader accepts, and the
// decoder accepts only headers whose entries are well formed and tile [0, file size - data start)
// exactly; every rejection is kDataLoss naming the file and the tensor.
//
// Example:
//   std::vector<SafetensorsEntry> e = {{.name = "w", .dtype = "F32", .shape = {2, 3}}};
//   std::string prefix = EncodeSafetensorsHeader(e, {{"format", "tessel"}});   // assigns data offsets
//   file.Write(prefix); file.Write(w_bytes);
//   SafetensorsHeader h = ReadSafetensorsHeader(File::OpenForRead(path));
//   h.Find("w")->begin + h.data_start;   // absolute byte offset of w
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/storage.h"
#include "core/tensor/dtype.h"
#include "core/tensor/shape.h"

namespace tessel::checkpoint {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "BF16", "I64", "BOOL", "U8", ...
  Shape shape;
  int64_t begin = 0;  // data_offsets: relative to the first data byte
  int64_t end = 0;
  int64_t nbytes() const { return end - begin; }
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;        // sorted by begin (data order)
  std::map<std::string, std::string> metadata;  // "__metadata__"
  int64_t data_start = 0;                       // 8 + header length
  int64_t file_size = 0;
  // nullptr when absent.
  const SafetensorsEntry* Find(std::string_view name) const;
};

// "F32" for kFloat32, ... (every tessel dtype has a safetensors name).
std::string_view SafetensorsDTypeName(DType dtype);
// nullopt for safetensors dtypes tessel has no type for (U8, F8_E4M3, ...).
std::optional<DType> DTypeFromSafetensors(std::string_view name);
// Element size of any safetensors dtype name; nullopt for an unknown name.
std::optional<int64_t> SafetensorsElementSize(std::string_view name);

// Assigns begin/end to `entries` in order (each numel * element size bytes, contiguous) and returns the
// file prefix: length + JSON header padded with spaces to a multiple of 8 (so data starts aligned).
std::string EncodeSafetensorsHeader(std::vector<SafetensorsEntry>& entries,
                                    const std::map<std::string, std::string>& metadata);
// Parses and validates the prefix of `file` (kDataLoss naming `file.path()` on any defect).
SafetensorsHeader ReadSafetensorsHeader(const File& file);
// The same decoding from an in-memory image of a whole file (tests, the fuzz target); `path` names it.
SafetensorsHeader ParseSafetensorsHeader(std::string_view file_bytes, const std::string& path);

}  // namespace tessel::checkpoint
