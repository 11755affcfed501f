// checkpoint/export.cc — checkpoint → safetensors (full tensors) and safetensors → any layout.
#include "checkpoint/export.h"

#include <filesystem>

#include "checkpoint/internal/chunk_reader.h"
#include "checkpoint/internal/load_engine.h"
#include "checkpoint/local_shard.h"
#include "checkpoint/metadata.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/storage.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/tensor/factory.h"

namespace tessel::checkpoint {
namespace {

// One full tensor assembled from its verified chunks.
Tensor AssembleFull(const std::string& fqn, const TensorMeta& m, internal::ChunkReader& reader) {
  Tensor full;
  {
    memory::LedgerScope ledger(memory::Ledger::kOther);
    full = Empty(m.shape, m.dtype);
  }
  const LocalShard dst{full, m.dtype, m.shape, FullBox(m.shape), "dense", false};
  int64_t covered = 0;
  for (const ChunkMeta& c : m.chunks) {
    reader.CopyOverlap(fqn, m.dtype, c, c.box, dst);
    covered += Volume(c.box);
  }
  TESSEL_CHECK_CODE(ErrorCode::kDataLoss, covered == NumElements(m.shape), "checkpoint export: the chunks of '", fqn,
                    "' cover ", covered, " of ", NumElements(m.shape), " elements");
  return full;
}

// Describes a safetensors file as a one-file checkpoint without checksums.
Metadata DescribeSafetensors(const std::string& path, const SafetensorsHeader& h,
                             std::vector<std::string>* unsupported) {
  Metadata md;
  md.checksum_block_bytes = 8;
  md.files.push_back({std::filesystem::path(path).filename().string(), 0, h.file_size});
  for (const SafetensorsEntry& e : h.entries) {
    const StoredRange where{0, e.name, h.data_start + e.begin, e.nbytes(), {}};
    if (e.dtype == "U8" && e.shape.size() == 1) {
      md.bytes[e.name] = where;
    } else if (std::optional<DType> dt = DTypeFromSafetensors(e.dtype)) {
      md.tensors[e.name] = TensorMeta{*dt, e.shape, "safetensors", {ChunkMeta{FullBox(e.shape), where}}};
    } else {
      unsupported->push_back(e.name + " (" + e.dtype + ")");
    }
  }
  return md;
}

// The output must not land inside the checkpoint being read (it could replace metadata.json or a data
// file; `export CKPT CKPT/metadata.json` once destroyed the index) nor in any other checkpoint directory.
void CheckOutputOutsideCheckpoints(const std::string& dir, const std::string& out_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path ckpt = fs::weakly_canonical(fs::path(dir), ec);
  const fs::path out = fs::weakly_canonical(fs::path(out_path), ec);
  const fs::path parent = out.parent_path();
  bool inside = false;
  for (fs::path p = parent; !p.empty(); p = p.parent_path()) {
    inside = inside || p == ckpt;
    if (p == p.parent_path()) break;
  }
  TESSEL_CHECK(!inside, "checkpoint export: the output '", out_path, "' is inside the checkpoint directory '", dir,
               "' it reads; writing there could overwrite the checkpoint. HINT: choose a path outside it");
  TESSEL_CHECK(!fs::exists(parent / std::string(kMetadataFileName), ec), "checkpoint export: the output '", out_path,
               "' is inside the checkpoint directory '", parent.string(), "' (it has a ", kMetadataFileName,
               "); writing there could overwrite that checkpoint. HINT: choose a path outside it");
}

}  // namespace

ExportResult ExportToSafetensors(const std::string& dir, const std::string& out_path, bool verify_checksums) {
  CheckOutputOutsideCheckpoints(dir, out_path);
  const Metadata md = ReadMetadata(dir);
  std::vector<std::string> paths;
  for (const FileMeta& f : md.files) paths.push_back(JoinPath(dir, f.name));
  internal::ChunkReader reader(md, paths, verify_checksums, int64_t{64} << 20);
  std::vector<SafetensorsEntry> entries;
  for (const auto& [fqn, t] : md.tensors) {
    entries.push_back({fqn, std::string(SafetensorsDTypeName(t.dtype)), t.shape});
  }
  std::map<std::string, std::string> meta{{"format", "pt"}, {"tessel.save_id", md.save_id}};
  for (const auto& [fqn, v] : md.values) meta["tessel.value." + fqn] = ScalarValueToString(v);
  const std::string prefix = EncodeSafetensorsHeader(entries, meta);
  const std::string tmp = out_path + ".tmp-export";
  ExportResult result;
  try {
    File out = File::Create(tmp);
    out.Write(prefix.data(), static_cast<int64_t>(prefix.size()));
    for (const auto& [fqn, t] : md.tensors) {
      const Tensor full = AssembleFull(fqn, t, reader);  // the only full tensor alive
      const int64_t n = full.numel() * ElementSize(full.dtype());
      out.Write(full.raw_data(), n);
      ++result.num_tensors;
      result.tensor_bytes += n;
    }
    out.Sync();
    out.Close();
    RenameFile(tmp, out_path);
  } catch (...) {
    RemoveFileIfExists(tmp);  // a failed export (bad chunk, full disk, OUT a directory) leaves no partial file
    throw;
  }
  result.num_skipped_bytes_entries = static_cast<int64_t>(md.bytes.size());
  return result;
}

LoadResult ImportSafetensors(StateDict& state_dict, const std::string& path, const LoadOptions& options) {
  const SafetensorsHeader h = ReadSafetensorsHeader(File::OpenForRead(path));
  std::vector<std::string> unsupported;
  const Metadata md = DescribeSafetensors(path, h, &unsupported);
  for (const std::string& u : unsupported) {
    const std::string name = u.substr(0, u.rfind(" ("));
    TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, !state_dict.count(name), "safetensors import from '", path,
                      "': tensor ", u, " has a dtype tessel does not support");
    TESSEL_CHECK(!options.strict || options.allow_unexpected_keys, "safetensors import from '", path,
                 "': unexpected tensor ", u,
                 " (not in the state dict). HINT: LoadOptions.strict = false or allow_unexpected_keys skips it");
  }
  LoadOptions opts = options;
  opts.verify_checksums = false;  // safetensors carries no checksums
  LoadResult r = internal::LoadFromMetadata(state_dict, md, {path}, opts, path);
  for (const std::string& u : unsupported) r.unexpected_keys.push_back(u.substr(0, u.rfind(" (")));
  return r;
}

}  // namespace tessel::checkpoint
