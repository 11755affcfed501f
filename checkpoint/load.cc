// checkpoint/load.cc — key checks, per-tensor chunk index, verified resharding reads.
#include "checkpoint/load.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>

#include "checkpoint/chunk_index.h"
#include "checkpoint/internal/chunk_reader.h"
#include "checkpoint/internal/load_engine.h"
#include "checkpoint/local_shard.h"
#include "checkpoint/storage.h"
#include "core/base/error.h"

namespace tessel::checkpoint {
namespace internal {
namespace {

std::string KindOf(const Metadata& md, const std::string& key) {
  if (md.tensors.count(key)) return "tensor";
  if (md.bytes.count(key)) return "bytes";
  const ScalarValue& v = md.values.at(key);
  return v.index() == 0 ? "int64" : v.index() == 1 ? "float64" : "string";
}

bool InCheckpoint(const Metadata& md, const std::string& key) {
  return md.tensors.count(key) || md.bytes.count(key) || md.values.count(key);
}

// "" when the entry can be loaded from the checkpoint, else what differs.
std::string Mismatch(const Metadata& md, const std::string& key, const StateValue& v) {
  const std::string have = KindOf(md, key);
  const std::string want(StateValueKindName(v));
  if (have != want) return key + ": checkpoint " + have + ", state dict " + want;
  if (const Tensor* t = std::get_if<Tensor>(&v)) {
    const TensorMeta& m = md.tensors.at(key);
    if (m.dtype != t->dtype() || m.shape != t->sizes()) {
      return Str(key, ": checkpoint ", DTypeName(m.dtype), " ", ShapeStr(m.shape), ", state dict ",
                 DTypeName(t->dtype()), " ", ShapeStr(t->sizes()));
    }
  }
  return "";
}

// The first kListed keys, then how many more (a model loaded into the wrong config lists hundreds).
std::string List(const std::vector<std::string>& v, bool quote) {
  constexpr size_t kListed = 12;
  std::string s;
  for (size_t i = 0; i < std::min(v.size(), kListed); ++i) s += (s.empty() ? "" : "; ") + (quote ? "'" + v[i] + "'" : v[i]);
  if (v.size() > kListed) s += Str("; ... and ", v.size() - kListed, " more");
  return "[" + s + "]";
}

LoadResult CheckKeys(const StateDict& sd, const Metadata& md, const LoadOptions& options, const std::string& source) {
  LoadResult r;
  std::vector<std::string> mismatched;
  for (const auto& [key, v] : sd) {
    if (!InCheckpoint(md, key)) {
      r.missing_keys.push_back(key);
    } else if (std::string m = Mismatch(md, key, v); !m.empty()) {
      mismatched.push_back(m);
    }
  }
  auto unexpected = [&](const std::string& key) {
    if (!sd.count(key)) r.unexpected_keys.push_back(key);
  };
  for (const auto& [key, t] : md.tensors) unexpected(key);
  for (const auto& [key, b] : md.bytes) unexpected(key);
  for (const auto& [key, v] : md.values) unexpected(key);
  const bool unexpected_ok = !options.strict || options.allow_unexpected_keys;
  if (mismatched.empty() && (!options.strict || r.missing_keys.empty()) && (unexpected_ok || r.unexpected_keys.empty())) {
    return r;
  }
  const std::string all = Str("checkpoint load from '", source, "': ", mismatched.size(), " mismatched ",
                              List(mismatched, false), ", ", r.missing_keys.size(), " missing ",
                              List(r.missing_keys, true), " (in the state dict, not in the checkpoint), ",
                              r.unexpected_keys.size(), " unexpected ", List(r.unexpected_keys, true),
                              " (in the checkpoint, not in the state dict). HINT: ",
                              mismatched.empty() ? "LoadOptions.strict = false loads the matching keys and reports "
                                                   "the rest; allow_unexpected_keys accepts a checkpoint with more "
                                                   "keys than the state dict"
                                                 : "a mismatched entry is never skipped: fix the model's config or "
                                                   "drop the key from the state dict");
  TESSEL_CHECK(mismatched.empty(), all);
  TESSEL_CHECK_CODE(ErrorCode::kNotFound, !options.strict || r.missing_keys.empty(), all);
  TESSEL_CHECK(unexpected_ok || r.unexpected_keys.empty(), all);
  return r;
}

// torch's refusal to write into a tensor whose elements share memory: an expanded tensor (a stride-0 dim of size
// > 1) took the last saved value in every element.
void CheckWritable(const std::string& fqn, const Tensor& t) {
  const Tensor local = DescribeLocalShard("checkpoint load", fqn, t).local;
  for (int64_t d = 0; d < local.dim(); ++d) {
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, local.size(d) <= 1 || local.stride(d) != 0, "checkpoint load: '",
                      fqn, "' is ", ShapeStr(local.sizes()), " with strides ", ShapeStr(local.strides()),
                      ": more than one of its elements refers to a single memory location (an expanded tensor); "
                      "load into a tensor of its own (.clone() it)");
  }
}

void LoadTensor(const std::string& fqn, const Tensor& t, const TensorMeta& m, ChunkReader& reader, LoadResult& result) {
  const LocalShard dst = DescribeLocalShard("checkpoint load", fqn, t);
  if (Volume(dst.box) == 0) return;
  std::vector<Box> boxes;
  boxes.reserve(m.chunks.size());
  for (const ChunkMeta& c : m.chunks) boxes.push_back(c.box);
  const ChunkIndex index(std::move(boxes));
  int64_t covered = 0;
  for (const ReadItem& item : PlanReads(index, dst.box)) {
    reader.CopyOverlap(fqn, m.dtype, m.chunks[static_cast<size_t>(item.chunk)], item.overlap, dst);
    covered += Volume(item.overlap);
    ++result.chunks_read;
  }
  TESSEL_CHECK_CODE(ErrorCode::kDataLoss, covered == Volume(dst.box), "checkpoint load: the saved chunks of '", fqn,
                    "' cover ", covered, " of the ", Volume(dst.box), " elements of this rank's box ",
                    BoxToString(dst.box), "; the metadata is inconsistent");
}

}  // namespace

LoadResult LoadFromMetadata(StateDict& state_dict, const Metadata& md, std::vector<std::string> paths,
                            const LoadOptions& options, const std::string& source) {
  LoadResult result = CheckKeys(state_dict, md, options, source);
  for (const auto& [key, value] : state_dict) {  // before any write: a refused entry leaves every tensor as it was
    const Tensor* t = std::get_if<Tensor>(&value);
    if (t != nullptr && t->defined() && InCheckpoint(md, key)) CheckWritable(key, *t);
  }
  ChunkReader reader(md, std::move(paths), options.verify_checksums, options.max_staging_bytes);
  for (auto& [key, value] : state_dict) {
    if (!InCheckpoint(md, key) || !Mismatch(md, key, value).empty()) continue;
    if (const Tensor* t = std::get_if<Tensor>(&value)) {
      LoadTensor(key, *t, md.tensors.at(key), reader, result);
    } else if (std::holds_alternative<Bytes>(value)) {
      value = Bytes{reader.ReadBytes(key, md.bytes.at(key))};
    } else {
      std::visit([&](const auto& v) { value = v; }, md.values.at(key));
    }
  }
  result.bytes_read = reader.bytes_read();
  return result;
}

// [Note: load-time recovery] A save moves metadata.json aside (metadata.json.prev-<id>) before it
// replaces any data file, and leaves <file>.tmp-<id> temporaries until it commits. A writer that died
// leaves both behind. When no live writer holds the directory lock, a load removes the temporaries, and
// restores the moved-aside index if every data file it names is still that save's (so the save died
// before replacing one): the previous checkpoint loads without a manual rename.
namespace {

// How long a load waits for another process's recovery (or a save) to put metadata.json in place.
// (Only when a moved-aside index exists to restore: an incomplete checkpoint without one fails at once.)
constexpr std::chrono::seconds kRecoveryWait{60};

bool RestoreMovedAsideIndex(const std::string& dir) {
  const std::string meta = JoinPath(dir, kMetadataFileName);
  for (const std::string& name : ListDir(dir)) {
    if (name.rfind(std::string(kMetadataFileName) + ".prev-", 0) != 0) continue;
    try {
      const Metadata prev = ParseMetadata(ReadWholeFile(JoinPath(dir, name)), JoinPath(dir, name));
      std::vector<std::string> paths;
      for (const FileMeta& f : prev.files) paths.push_back(JoinPath(dir, f.name));
      ChunkReader reader(prev, paths, /*verify=*/false, int64_t{1} << 20);
      for (size_t i = 0; i < paths.size(); ++i) reader.CheckFile(static_cast<int>(i));  // exists, size, save id
    } catch (const Error&) {
      continue;  // its data files were replaced (or it is damaged): not restorable
    }
    RenameFile(JoinPath(dir, name), meta);
    SyncDir(dir);
    return true;
  }
  return false;
}

void CleanUpAfterDeadWriters(const std::string& dir) {
  const std::string meta = JoinPath(dir, kMetadataFileName);
  std::vector<std::string> stale;
  for (const std::string& name : ListDir(dir)) {
    const bool prev = name.rfind(std::string(kMetadataFileName) + ".prev-", 0) == 0;
    if (name.find(".tmp-") != std::string::npos || prev) stale.push_back(name);
  }
  if (stale.empty() && PathExists(meta)) return;  // the common case: no lock, no write
  std::optional<DirLock> lock = DirLock::TryAcquire(dir, Str("load (pid ", ::getpid(), ")"));
  const bool restorable = std::any_of(stale.begin(), stale.end(), [](const std::string& name) {
    return name.rfind(std::string(kMetadataFileName) + ".prev-", 0) == 0;
  });
  if (!lock && !PathExists(meta) && restorable) {
    // A save or another rank's load holds it; the latter may be restoring the index right now, which reads
    // every data file's header (seconds on a shared file system). Wait for the index, or for the lock, and
    // restore it here if the holder let go without one. A fixed 2 s wait left slow peers failing with
    // kNotFound while the restoring rank loaded, and the job split at its next collective.
    const auto deadline = std::chrono::steady_clock::now() + kRecoveryWait;
    while (!lock && !PathExists(meta) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      lock = DirLock::TryAcquire(dir, Str("load (pid ", ::getpid(), ")"));
    }
  }
  if (!lock) return;
  if (!PathExists(meta)) RestoreMovedAsideIndex(dir);
  for (const std::string& name : ListDir(dir)) {
    const bool prev = name.rfind(std::string(kMetadataFileName) + ".prev-", 0) == 0;
    // With the lock free no writer is alive: its temporaries are garbage, and so is a moved-aside index
    // once an index is in place (the save that moved it committed, or it was restored above).
    if (name.find(".tmp-") != std::string::npos || (prev && PathExists(meta))) RemoveFileIfExists(JoinPath(dir, name));
  }
}

}  // namespace

}  // namespace internal

void RecoverBeforeLoad(const std::string& dir) {
  if (std::filesystem::is_directory(dir)) internal::CleanUpAfterDeadWriters(dir);
}

LoadResult Load(StateDict& state_dict, const std::string& dir, const LoadOptions& options) {
  RecoverBeforeLoad(dir);
  const Metadata md = ReadMetadata(dir);
  std::vector<std::string> paths;
  for (const FileMeta& f : md.files) paths.push_back(JoinPath(dir, f.name));
  return internal::LoadFromMetadata(state_dict, md, std::move(paths), options, dir);
}

}  // namespace tessel::checkpoint
