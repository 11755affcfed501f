// checkpoint/metadata.cc — metadata.json encoding and validating decoding (nlohmann::json).
#include "checkpoint/metadata.h"

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
  out.file = static_cast<int>(r.Int(j, "file", what));
  if (out.file < 0 || out.file >= static_cast<int>(m.files.size()))
    Corrupt(r.source, what + ": file index out of range");
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

TensorMeta ParseTensor(const Reader& r, const std::string& fqn, const Json& j, const Metadata& m) {
  const std::string what = "tensor '" + fqn + "'";
  TensorMeta t;
  const std::optional<DType> dtype = DTypeFromName(r.String(j, "dtype", what));
  if (!dtype) Corrupt(r.source, what + ": unknown dtype");
  t.dtype = *dtype;
  t.shape = r.Ints(j, "shape", what);
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
    if (chunk.where.byte_length != Volume(chunk.box) * ElementSize(t.dtype)) {
      Corrupt(r.source, Str(cwhat, ": ", chunk.where.byte_length, " bytes for ", Volume(chunk.box), " elements"));
    }
    t.chunks.push_back(std::move(chunk));
  }
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

void ParseHeader(const Reader& r, const Json& j, Metadata& m) {
  if (!j.is_object() || !j.contains("magic") || j["magic"] != kMetadataMagic) {
    TESSEL_FAIL(ErrorCode::kDataLoss, "checkpoint metadata '", r.source, "' is not a tessel checkpoint index (magic '",
                kMetadataMagic, "' missing)");
  }
  m.version = static_cast<int>(r.Int(j, "version", "the header"));
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, m.version == kFormatVersion, "checkpoint metadata '", r.source,
                    "' has format version ", m.version, " but this build reads version ", kFormatVersion,
                    ". HINT: load it with the tessel release that wrote it (or a newer one), or convert it with "
                    "`tessel-ckpt export DIR out.safetensors` there");
  m.save_id = r.String(j, "save_id", "the header");
  m.world_size = static_cast<int>(r.Int(j, "world_size", "the header"));
  const Json& cs = r.At(j, "checksum", "the header");
  if (r.String(cs, "algorithm", "checksum") != "xxh3-64") Corrupt(r.source, "unknown checksum algorithm");
  m.checksum_block_bytes = r.Int(cs, "block_bytes", "checksum");
  if (m.checksum_block_bytes <= 0) Corrupt(r.source, "checksum block_bytes must be positive");
  for (const Json& f : r.At(j, "files", "the header")) {
    m.files.push_back(
        {r.String(f, "name", "a file"), static_cast<int>(r.Int(f, "rank", "a file")), r.Int(f, "size", "a file")});
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
         {"version", m.version},
         {"save_id", m.save_id},
         {"world_size", m.world_size},
         {"checksum", Json{{"algorithm", "xxh3-64"}, {"block_bytes", m.checksum_block_bytes}}},
         {"files", files},
         {"tensors", tensors},
         {"bytes", bytes},
         {"values", values}};
  return j.dump(1) + "\n";
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
