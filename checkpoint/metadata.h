// checkpoint/metadata.h — the checkpoint index (DIR/metadata.json): what was saved, where each chunk
// lives, and its checksums. The data files are safetensors; this file makes the set reshardable.
//
// Format (JSON, language-neutral; any reader can resolve every chunk to a byte range of a file):
//   {"magic": "tessel-checkpoint", "version": 2, "save_id": "<hex>", "world_size": W,
//    "checksum": {"algorithm": "xxh3-64", "block_bytes": B},
//    "files": [{"name": "data-00000-of-00004.safetensors", "rank": 0, "size": <bytes>}, ...],
//    "tensors": {"<fqn>": {"dtype": "float32", "shape": [8, 16], "layout": "(dp=4) [S(0)]",
//                "chunks": [{"offsets": [0, 0], "sizes": [2, 16], "file": 0, "entry": "<fqn>[0:2, 0:16]",
//                            "byte_offset": 256, "byte_length": 128, "checksums": ["<16 hex>", ...]}]}},
//    "bytes":  {"<fqn>": {"file": 0, "entry": "<fqn>", "byte_offset": ..., "byte_length": ..., "checksums": [...]}},
//    "values": {"<fqn>": {"type": "int64", "value": 5} | {"type": "float64", "value": 0.1,
//                         "bits": "3fb999999999999a"} | {"type": "string", "value": "..."}},
//    "index_checksum": "<16 hex>"}
// byte_offset is absolute in the file; checksum k covers chunk bytes [k*B, min((k+1)*B, byte_length)).
// Floats are restored from "bits" (exact, and NaN/Inf survive); "value" is for humans.
// index_checksum is XXH3-64 of this writer's canonical dump (1-space indent, trailing newline) of the
// object without that key: the index protects itself as the block checksums protect the data.
//
// Invariant: a Metadata returned by ParseMetadata is internally consistent (index checksum matches
// (version >= 2), file indices in range, chunk boxes inside the shape, the chunks of each tensor tile it
// exactly: no overlap, no gap; byte lengths = volume * element size, one checksum per block; no count
// overflows int64) and of a version this build reads (1 or 2). Errors: a missing metadata.json is
// kNotFound ("not a complete checkpoint"), a wrong magic or malformed content kDataLoss naming the file,
// tensor and chunk, another format version kFailedPrecondition with a hint.
//
// Example:
//   Metadata m = ReadMetadata(dir);
//   const TensorMeta& w = m.tensors.at("layers.0.attn.wq.weight");
//   for (const ChunkMeta& c : w.chunks) ... m.files[c.where.file].name ...
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "checkpoint/box.h"
#include "core/tensor/dtype.h"
#include "core/tensor/shape.h"

namespace tessel::checkpoint {

inline constexpr std::string_view kMetadataFileName = "metadata.json";
inline constexpr std::string_view kMetadataMagic = "tessel-checkpoint";
// Version 2 adds "index_checksum"; version 1 indexes (without it) still load.
inline constexpr int kFormatVersion = 2;

// Where a run of bytes lives: a safetensors entry of a data file, and its block checksums.
struct StoredRange {
  int file = 0;  // index into Metadata::files
  std::string entry;
  int64_t byte_offset = 0;
  int64_t byte_length = 0;
  std::vector<uint64_t> checksums;
};

struct ChunkMeta {
  Box box;
  StoredRange where;
};

struct TensorMeta {
  DType dtype = DType::kFloat32;
  Shape shape;
  std::string layout;  // how it was placed when saved (for inspect; loading never needs it)
  std::vector<ChunkMeta> chunks;
};

using ScalarValue = std::variant<int64_t, double, std::string>;

struct FileMeta {
  std::string name;
  int rank = 0;
  int64_t size = 0;
};

struct Metadata {
  int version = kFormatVersion;
  std::string save_id;
  int world_size = 1;
  int64_t checksum_block_bytes = 0;
  std::vector<FileMeta> files;
  std::map<std::string, TensorMeta> tensors;
  std::map<std::string, StoredRange> bytes;
  std::map<std::string, ScalarValue> values;
};

// "data-00003-of-00008.safetensors"
std::string DataFileName(int rank, int world_size);
std::string MetadataToJson(const Metadata& m);
// `source` names the file in errors.
Metadata ParseMetadata(std::string_view text, const std::string& source);
// Reads DIR/metadata.json.
Metadata ReadMetadata(const std::string& dir);
// "int64 5", "float64 0.1", "string 'abc'".
std::string ScalarValueToString(const ScalarValue& v);
// DTypeName's inverse ("float32" → kFloat32); nullopt for an unknown name.
std::optional<DType> DTypeFromName(std::string_view name);

}  // namespace tessel::checkpoint
