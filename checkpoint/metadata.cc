// checkpoint/metadata.cc — metadata.json encoding and validating decoding (nlohmann::json).
#include "checkpoint/metadata.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "checkpoint/checksum.h"
#include "checkpoint/storage.h"
#include "core/base/error.h"

namespace tessel::checkpoint {
namespace {

using Json = nlohmann::ordered_json;

[[noreturn]] void Corrupt(const std::string& source, std::string_view what) {
  TESSEL_FAIL(ErrorCode::kDataLoss, "checkpoint metadata '", source, "' is corrupt: ", what,
              ". HINT: the checkpoint cannot be trusted; restore it from a copy or re-save it");
}

Json RangeToJson(const StoredRange& r) {
  Json sums = Json::array();
  for (uint64_t s : r.checksums) sums.push_back(ChecksumToHex(s));
  return Json{{"file", r.file},
              {"entry", r.entry},
              {"byte_offset", r.byte_offset},
              {"byte_length", r.byte_length},
              {"checksums", sums}};
}

Json ValueToJson(const ScalarValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return Json{{"type", "int64"}, {"value", *i}};
  if (const auto* s = std::get_if<std::string>(&v)) return Json{{"type", "string"}, {"value", *s}};
  const double d = std::get<double>(v);
  Json out{{"type", "float64"}, {"value", d}, {"bits", ChecksumToHex(std::bit_cast<uint64_t>(d))}};
  return out;
}

// Typed field access that turns every defect into kDataLoss naming `what`.
struct Reader {
  const std::string& source;
  const Json& At(const Json& obj, const char* key, std::string_view what) const {
    if (!obj.is_object() || !obj.contains(key)) Corrupt(source, Str(what, " has no '", key, "'"));
    return obj.at(key);
  }
  int64_t Int(const Json& obj, const char* key, std::string_view what) const {
    const Json& v = At(obj, key, what);
    if (!v.is_number_integer()) Corrupt(source, Str(what, ": '", key, "' is not an integer"));
    return v.get<int64_t>();
  }
  std::string String(const Json& obj, const char* key, std::string_view what) const {
    const Json& v = At(obj, key, what);
    if (!v.is_string()) Corrupt(source, Str(what, ": '", key, "' is not a string"));
    return v.get<std::string>();
  }
  Shape Ints(const Json& obj, const char* key, std::string_view what) const {
    const Json& v = At(obj, key, what);
    if (!v.is_array()) Corrupt(source, Str(what, ": '", key, "' is not an array"));
    Shape out;
    for (const Json& x : v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0) Corrupt(source, Str(what, ": bad '", key, "'"));
      out.push_back(x.get<int64_t>());
    }
    return out;
  }
};

StoredRange ParseRange(const Reader& r, const Json& j, const std::string& what, const Metadata& m) {
  StoredRange out;
  const int64_t file = r.Int(j, "file", what);  // range-checked before narrowing to int
  if (file < 0 || file >= static_cast<int64_t>(m.files.size())) Corrupt(r.source, what + ": file index out of range");
  out.file = static_cast<int>(file);
  out.entry = r.String(j, "entry", what);
  out.byte_offset = r.Int(j, "byte_offset", what);
  out.byte_length = r.Int(j, "byte_length", what);
  if (out.byte_offset < 0 || out.byte_length < 0) Corrupt(r.source, what + ": negative byte range");
  const Json& sums = r.At(j, "checksums", what);
  if (!sums.is_array()) Corrupt(r.source, what + ": checksums is not an array");
  for (const Json& s : sums) {
    const std::optional<uint64_t> v = s.is_string() ? ChecksumFromHex(s.get<std::string>()) : std::nullopt;
    if (!v) Corrupt(r.source, what + ": a checksum is not 16 hex digits");
    out.checksums.push_back(*v);
  }
  if (static_cast<int64_t>(out.checksums.size()) != NumChecksumBlocks(out.byte_length, m.checksum_block_bytes)) {
    Corrupt(r.source, Str(what, ": ", out.checksums.size(), " checksums for ", out.byte_length, " bytes in blocks of ",
                          m.checksum_block_bytes));
  }
  return out;
}

// Byte count of a box read from the file: an overflowing shape is corruption, not bad caller input.
int64_t CheckedBytes(const Reader& r, const Shape& sizes, DType dtype, const std::string& what) {
  try {
    return NumBytes(sizes, ElementSize(dtype));
  } catch (const Error& e) {
    Corrupt(r.source, Str(what, ": ", e.what()));
  }
}

// The chunks of a tensor must tile its shape exactly: each inside the bounds (checked by the caller),
// no two overlapping, and their volumes summing to the element count (with no overlap, that rules out
// gaps). A one-bit change of an offset or a hand-edited shape breaks one of these.
void CheckChunksTile(const Reader& r, const std::string& fqn, const TensorMeta& t, const Metadata& m) {
  auto name = [&](const ChunkMeta& c) {
    return Str("chunk ", BoxToString(c.box), " (in ", m.files[static_cast<size_t>(c.where.file)].name, ")");
  };
  int64_t covered = 0;
  for (size_t i = 0; i < t.chunks.size(); ++i) {
    const ChunkMeta& a = t.chunks[i];
    for (size_t k = 0; k < i; ++k) {
      if (Intersect(a.box, t.chunks[k].box)) {
        Corrupt(r.source, Str("tensor '", fqn, "' ", name(a), " overlaps ", name(t.chunks[k])));
      }
    }
    covered += Volume(a.box);  // no overflow: disjoint boxes inside a shape whose count fits in int64
  }
  const int64_t total = NumElements(t.shape);
  if (covered != total) {
    Corrupt(r.source, Str("tensor '", fqn, "' of shape ", ShapeStr(t.shape), ": its ", t.chunks.size(),
                          " chunks cover ", covered, " of ", total, " elements (a gap)"));
  }
}

TensorMeta ParseTensor(const Reader& r, const std::string& fqn, const Json& j, const Metadata& m) {
  const std::string what = "tensor '" + fqn + "'";
  TensorMeta t;
  const std::optional<DType> dtype = DTypeFromName(r.String(j, "dtype", what));
  if (!dtype) Corrupt(r.source, what + ": unknown dtype");
  t.dtype = *dtype;
  t.shape = r.Ints(j, "shape", what);
  CheckedBytes(r, t.shape, t.dtype, what + " shape " + ShapeStr(t.shape));
  t.layout = j.contains("layout") && j["layout"].is_string() ? j["layout"].get<std::string>() : "";
  const Json& chunks = r.At(j, "chunks", what);
  if (!chunks.is_array()) Corrupt(r.source, what + ": chunks is not an array");
  for (const Json& c : chunks) {
    ChunkMeta chunk;
    chunk.box.offsets = r.Ints(c, "offsets", what);
    chunk.box.sizes = r.Ints(c, "sizes", what);
    const std::string cwhat = what + " chunk " + BoxToString(chunk.box);
    if (chunk.box.offsets.size() != t.shape.size() || chunk.box.sizes.size() != t.shape.size() ||
        !Contains(FullBox(t.shape), chunk.box)) {
      Corrupt(r.source, cwhat + " lies outside the shape " + ShapeStr(t.shape));
    }
    chunk.where = ParseRange(r, c, cwhat, m);
    if (chunk.where.byte_length != CheckedBytes(r, chunk.box.sizes, t.dtype, cwhat)) {
      Corrupt(r.source, Str(cwhat, ": ", chunk.where.byte_length, " bytes for ", Volume(chunk.box), " elements"));
    }
    t.chunks.push_back(std::move(chunk));
  }
  CheckChunksTile(r, fqn, t, m);
  return t;
}

ScalarValue ParseValue(const Reader& r, const std::string& fqn, const Json& j) {
  const std::string what = "value '" + fqn + "'";
  const std::string type = r.String(j, "type", what);
  if (type == "int64") return r.Int(j, "value", what);
  if (type == "string") return r.String(j, "value", what);
  if (type == "float64") {
    const std::optional<uint64_t> bits = ChecksumFromHex(r.String(j, "bits", what));
    if (!bits) Corrupt(r.source, what + ": bits is not 16 hex digits");
    return std::bit_cast<double>(*bits);
  }
  Corrupt(r.source, what + ": unknown type '" + type + "'");
}

// The index's own checksum: XXH3-64 of the canonical text (this writer's dump of the JSON without the
// "index_checksum" key). Any edit of a value, even one the structural checks accept, changes it.
std::string CanonicalText(const Json& j) { return j.dump(1) + "\n"; }

void CheckIndexChecksum(const Reader& r, const Json& j) {
  const std::string stored = r.String(j, "index_checksum", "the header");
  Json body = j;
  body.erase("index_checksum");
  const std::string actual = ChecksumToHex(Checksum(CanonicalText(body).data(),
                                                    static_cast<int64_t>(CanonicalText(body).size())));
  if (stored != actual) {
    Corrupt(r.source, Str("index checksum mismatch (stored ", stored, ", computed ", actual,
                          "): the index was edited or damaged after it was written"));
  }
}

void ParseHeader(const Reader& r, const Json& j, Metadata& m) {
  if (!j.is_object() || !j.contains("magic") || j["magic"] != kMetadataMagic) {
    TESSEL_FAIL(ErrorCode::kDataLoss, "checkpoint metadata '", r.source, "' is not a tessel checkpoint index (magic '",
                kMetadataMagic, "' missing)");
  }
  const int64_t version = r.Int(j, "version", "the header");
  m.version = static_cast<int>(std::clamp<int64_t>(version, -1, 1 << 20));
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, version >= 1 && version <= kFormatVersion, "checkpoint metadata '",
                    r.source, "' has format version ", version, " but this build reads versions 1 to ", kFormatVersion,
                    ". HINT: load it with the tessel release that wrote it (or a newer one), or convert it with "
                    "`tessel-ckpt export DIR out.safetensors` there");
  m.save_id = r.String(j, "save_id", "the header");
  const int64_t world_size = r.Int(j, "world_size", "the header");
  if (world_size < 1 || world_size > (1 << 24)) Corrupt(r.source, Str("world_size ", world_size, " is out of range"));
  m.world_size = static_cast<int>(world_size);
  const Json& cs = r.At(j, "checksum", "the header");
  if (r.String(cs, "algorithm", "checksum") != "xxh3-64") Corrupt(r.source, "unknown checksum algorithm");
  m.checksum_block_bytes = r.Int(cs, "block_bytes", "checksum");
  if (m.checksum_block_bytes <= 0) Corrupt(r.source, "checksum block_bytes must be positive");
  for (const Json& f : r.At(j, "files", "the header")) {
    const int64_t rank = r.Int(f, "rank", "a file");
    if (rank < 0 || rank >= m.world_size) Corrupt(r.source, Str("a file's rank ", rank, " is out of range"));
    const int64_t size = r.Int(f, "size", "a file");
    if (size < 0) Corrupt(r.source, Str("data file '", r.String(f, "name", "a file"), "' has size ", size));
    m.files.push_back({r.String(f, "name", "a file"), static_cast<int>(rank), size});
  }
}

}  // namespace

std::string DataFileName(int rank, int world_size) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "data-%05d-of-%05d.safetensors", rank, world_size);
  return buf;
}

std::optional<DType> DTypeFromName(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (DTypeName(static_cast<DType>(i)) == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

std::string ScalarValueToString(const ScalarValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return Str("int64 ", *i);
  if (const auto* s = std::get_if<std::string>(&v)) return Str("string '", *s, "'");
  return Json(std::get<double>(v)).dump().insert(0, "float64 ");
}

std::string MetadataToJson(const Metadata& m) {
  Json files = Json::array();
  for (const FileMeta& f : m.files) files.push_back(Json{{"name", f.name}, {"rank", f.rank}, {"size", f.size}});
  Json tensors = Json::object();
  for (const auto& [fqn, t] : m.tensors) {
    Json chunks = Json::array();
    for (const ChunkMeta& c : t.chunks) {
      Json cj{{"offsets", c.box.offsets}, {"sizes", c.box.sizes}};
      cj.update(RangeToJson(c.where));
      chunks.push_back(std::move(cj));
    }
    tensors[fqn] = Json{{"dtype", DTypeName(t.dtype)}, {"shape", t.shape}, {"layout", t.layout}, {"chunks", chunks}};
  }
  Json bytes = Json::object();
  for (const auto& [fqn, r] : m.bytes) bytes[fqn] = RangeToJson(r);
  Json values = Json::object();
  for (const auto& [fqn, v] : m.values) values[fqn] = ValueToJson(v);
  Json j{{"magic", kMetadataMagic},
         {"version", kFormatVersion},
         {"save_id", m.save_id},
         {"world_size", m.world_size},
         {"checksum", Json{{"algorithm", "xxh3-64"}, {"block_bytes", m.checksum_block_bytes}}},
         {"files", files},
         {"tensors", tensors},
         {"bytes", bytes},
         {"values", values}};
  const std::string body = CanonicalText(j);
  j["index_checksum"] = ChecksumToHex(Checksum(body.data(), static_cast<int64_t>(body.size())));
  return CanonicalText(j);
}

Metadata ParseMetadata(std::string_view text, const std::string& source) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) Corrupt(source, "not valid JSON (truncated or overwritten?)");
  const Reader r{source};
  Metadata m;
  ParseHeader(r, j, m);
  for (const auto& [fqn, t] : r.At(j, "tensors", "the header").items()) m.tensors[fqn] = ParseTensor(r, fqn, t, m);
  for (const auto& [fqn, b] : r.At(j, "bytes", "the header").items()) {
    m.bytes[fqn] = ParseRange(r, b, "bytes '" + fqn + "'", m);
  }
  for (const auto& [fqn, v] : r.At(j, "values", "the header").items()) m.values[fqn] = ParseValue(r, fqn, v);
  // Last, so a structural defect is reported by what it breaks; this catches every edit that stays
  // structurally valid (a chunk offset 16 → 17 that still tiles, a renamed entry, a changed value).
  // Version 1 indexes predate it (structural checks only); a checksum that is present is always checked,
  // so editing "version" to 1 does not switch the check off.
  if (m.version >= 2 || j.contains("index_checksum")) CheckIndexChecksum(r, j);
  return m;
}

Metadata ReadMetadata(const std::string& dir) {
  const std::string path = JoinPath(dir, kMetadataFileName);
  if (!PathExists(path)) {
    std::string prev;
    if (PathExists(dir)) {
      for (const std::string& name : ListDir(dir)) {
        if (name.rfind(std::string(kMetadataFileName) + ".prev-", 0) == 0) prev = name;
      }
    }
    TESSEL_FAIL(ErrorCode::kNotFound, "checkpoint load: '", dir, "' is not a complete checkpoint: ", kMetadataFileName,
                " is missing (the save never committed, or was interrupted). HINT: load an earlier checkpoint",
                prev.empty()
                    ? std::string()
                    : "; an interrupted save left " + prev + ": renaming it to " + std::string(kMetadataFileName) +
                          " restores the previous checkpoint if the save died before replacing its data "
                          "files (a load verifies that)");
  }
  return ParseMetadata(ReadWholeFile(path), path);
}

}  // namespace tessel::checkpoint
