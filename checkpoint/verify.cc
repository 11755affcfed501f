// checkpoint/verify.cc — full verification of a checkpoint directory.
#include "checkpoint/verify.h"

#include <optional>

#include "checkpoint/internal/chunk_reader.h"
#include "checkpoint/metadata.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/storage.h"
#include "core/base/error.h"

namespace tessel::checkpoint {
namespace {

// The data file's own header must index the range where the metadata says it is.
void CheckHeaderEntry(const std::string& path, const SafetensorsHeader& h, const std::string& what,
                      const StoredRange& r) {
  const SafetensorsEntry* e = h.Find(r.entry);
  TESSEL_CHECK_CODE(ErrorCode::kDataLoss, e != nullptr, "'", path, "' has no entry '", r.entry, "' for ", what);
  TESSEL_CHECK_CODE(ErrorCode::kDataLoss, h.data_start + e->begin == r.byte_offset && e->nbytes() == r.byte_length, "'",
                    path, "' entry '", r.entry, "' for ", what, " lies at [", h.data_start + e->begin, ", ",
                    h.data_start + e->end, ") but the metadata says [", r.byte_offset, ", ",
                    r.byte_offset + r.byte_length, ")");
}

}  // namespace

VerifyReport VerifyCheckpoint(const std::string& dir) {
  VerifyReport report;
  Metadata md;
  try {
    md = ReadMetadata(dir);
  } catch (const Error& e) {
    report.problems.push_back(e.what());
    return report;
  }
  std::vector<std::string> paths;
  for (const FileMeta& f : md.files) paths.push_back(JoinPath(dir, f.name));
  std::vector<std::optional<SafetensorsHeader>> headers(paths.size());
  internal::ChunkReader reader(md, paths, /*verify=*/true, int64_t{64} << 20);
  for (size_t i = 0; i < paths.size(); ++i) {  // one problem per bad file, not one per chunk in it
    try {
      reader.CheckFile(static_cast<int>(i));
      headers[i] = ReadSafetensorsHeader(File::OpenForRead(paths[i]));
      ++report.files_checked;
    } catch (const Error& e) {
      report.problems.push_back(Str("[", ErrorCodeName(e.code()), "] ", e.what()));
    }
  }
  auto check = [&](const std::string& what, const StoredRange& r) {
    const auto& h = headers[static_cast<size_t>(r.file)];
    if (!h) return;
    try {
      CheckHeaderEntry(paths[static_cast<size_t>(r.file)], *h, what, r);
      reader.VerifyRange(what, r);
      ++report.chunks_checked;
      report.bytes_checked += r.byte_length;
    } catch (const Error& e) {
      report.problems.push_back(Str("[", ErrorCodeName(e.code()), "] ", e.what()));
    }
  };
  for (const auto& [fqn, t] : md.tensors) {
    for (const ChunkMeta& c : t.chunks) check("'" + fqn + "' chunk " + BoxToString(c.box), c.where);
  }
  for (const auto& [fqn, r] : md.bytes) check("bytes '" + fqn + "'", r);
  return report;
}

}  // namespace tessel::checkpoint
