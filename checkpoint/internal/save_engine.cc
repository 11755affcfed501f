// checkpoint/internal/save_engine.cc — plan exchange, per-rank data files, metadata commit.
#include "checkpoint/internal/save_engine.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <random>

#include "checkpoint/checksum.h"
#include "checkpoint/safetensors.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"

namespace tessel::checkpoint::internal {
namespace {

using Json = nlohmann::json;

// What one rank wrote, reported to the coordinator.
struct RankWriteResult {
  std::string file;  // "" when nothing was written
  int64_t file_size = 0;
  std::vector<StoredRange> ranges;  // one per data item of writes[rank], in order (file index unset)
  std::string error;
};

std::string EncodeResult(const RankWriteResult& r) {
  Json ranges = Json::array();
  for (const StoredRange& s : r.ranges) {
    ranges.push_back(Json{{"entry", s.entry}, {"off", s.byte_offset}, {"len", s.byte_length}, {"sums", s.checksums}});
  }
  return Json{{"file", r.file}, {"size", r.file_size}, {"ranges", ranges}, {"error", r.error}}.dump();
}

RankWriteResult DecodeResult(const std::string& text) {
  const Json j = Json::parse(text);
  RankWriteResult r{j.at("file").get<std::string>(), j.at("size").get<int64_t>(), {}, j.at("error").get<std::string>()};
  for (const Json& s : j.at("ranges")) {
    r.ranges.push_back(StoredRange{0, s.at("entry").get<std::string>(), s.at("off").get<int64_t>(),
                                   s.at("len").get<int64_t>(), s.at("sums").get<std::vector<uint64_t>>()});
  }
  return r;
}

// Runs `fn`, turning an exception into a message (kept in `*err` to rethrow on this rank).
std::string Capture(const std::function<void()>& fn, std::exception_ptr* err) {
  try {
    fn();
    return "";
  } catch (const std::exception& e) {
    *err = std::current_exception();
    return e.what();
  }
}

// Every rank throws if any failed: the failing rank its own error, the others kAborted naming it.
void ThrowIfAnyFailed(std::string_view step, const std::vector<std::string>& errors, int rank,
                      std::exception_ptr mine) {
  if (mine) std::rethrow_exception(mine);
  for (size_t r = 0; r < errors.size(); ++r) {
    TESSEL_CHECK_CODE(ErrorCode::kAborted, errors[r].empty(), "checkpoint save: rank ", r, " failed while ", step,
                      " (this is rank ", rank, "; the save did not complete): ", errors[r]);
  }
}

std::string NewSaveId() {
  std::random_device rd;
  const uint64_t t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const uint64_t v =
      (static_cast<uint64_t>(rd()) << 32 | rd()) ^ (t * 0x9e3779b97f4a7c15ull) ^ static_cast<uint64_t>(::getpid());
  return ChecksumToHex(v);
}

uint64_t HashValue(const ScalarValue& v) {
  const std::string s = std::to_string(v.index()) + ":" + ScalarValueToString(v);
  return Checksum(s.data(), static_cast<int64_t>(s.size()));
}

// `s` with bytes outside printable ASCII as \xNN, for an error message about text that may not be UTF-8.
std::string Escaped(const std::string& s) {
  std::string out;
  for (const unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      constexpr char kHex[] = "0123456789abcdef";
      out += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
    }
  }
  return out;
}

// Keys and string values travel in JSON (the plan exchange, metadata.json), whose encoder throws on
// invalid UTF-8 (nlohmann's type_error 316, which names neither the key nor the rank). Checked here,
// with the same encoder, while every rank can still report the error through the plan exchange and
// before the coordinator touches the directory.
void CheckUtf8(const std::string& fqn, const std::string& text, bool is_key) {
  try {
    (void)nlohmann::json(text).dump();
  } catch (const nlohmann::json::type_error&) {
    TESSEL_FAIL(ErrorCode::kInvalidArgument, "checkpoint save: ",
                is_key ? Str("the key '", Escaped(fqn), "' is")
                       : Str("the string value of '", Escaped(fqn), "' (\"", Escaped(text), "\") is"),
                " not valid UTF-8. HINT: store binary data as checkpoint::Bytes (Python: a bytes value)");
  }
}

void Normalize(const StateDict& sd, int rank, std::vector<SaveEntry>* entries, LocalSavePlan* plan) {
  plan->rank = rank;
  for (const auto& [fqn, value] : sd) {
    CheckUtf8(fqn, fqn, /*is_key=*/true);
    if (const std::string* text = std::get_if<std::string>(&value)) CheckUtf8(fqn, *text, /*is_key=*/false);
    SaveEntry e{fqn, ItemKind::kTensor, {}, {}, int64_t{0}};
    WriteItem it{.fqn = fqn};
    if (const Tensor* t = std::get_if<Tensor>(&value)) {
      e.shard = DescribeLocalShard("checkpoint save", fqn, *t);
      it.dtype = e.shard.dtype;
      it.global_shape = e.shard.global_shape;
      it.box = e.shard.box;
      it.layout = e.shard.layout;
      it.nbytes = Volume(it.box) * ElementSize(it.dtype);
    } else if (const Bytes* b = std::get_if<Bytes>(&value)) {
      e.kind = it.kind = ItemKind::kBytes;
      e.bytes = b->data;
      it.nbytes = static_cast<int64_t>(b->data.size());
      it.content_hash = Checksum(b->data.data(), it.nbytes);
    } else {
      e.kind = it.kind = ItemKind::kValue;
      std::visit(
          [&](const auto& v) {
            if constexpr (!std::is_same_v<std::decay_t<decltype(v)>, Tensor> &&
                          !std::is_same_v<std::decay_t<decltype(v)>, Bytes>) {
              e.value = v;
            }
          },
          value);
      it.value = e.value;
      it.content_hash = HashValue(e.value);
    }
    entries->push_back(std::move(e));
    plan->items.push_back(std::move(it));
  }
}

bool IsOurDataOrTemp(const std::string& name) {
  const bool data = name.rfind("data-", 0) == 0 && name.find(".safetensors") != std::string::npos;
  return data || name.find(".tmp-") != std::string::npos || name.find(".prev-") != std::string::npos;
}

std::string PreviousMetadataPath(const std::string& dir, const std::string& save_id) {
  return JoinPath(dir, std::string(kMetadataFileName) + ".prev-" + save_id);
}

// Coordinator, before the plan exchange: create DIR, take the lock, make DIR incomplete by moving
// metadata.json aside (restored if this save fails before any data file is replaced).
DirLock SetUpDirectory(const std::string& dir, const std::string& save_id, bool sync) {
  MakeDirs(dir);
  DirLock lock = DirLock::Acquire(dir, Str("save ", save_id, " (pid ", ::getpid(), ")"));
  const std::string meta = JoinPath(dir, kMetadataFileName);
  if (PathExists(meta)) {
    RenameFile(meta, PreviousMetadataPath(dir, save_id));
    if (sync) SyncDir(dir);  // the old index is gone before any new data file appears
  }
  return lock;
}

// Coordinator, when a save fails before any rank renamed a data file: the previous checkpoint is intact.
void RestorePrevious(const std::string& dir, const std::string& save_id) noexcept {
  try {
    const std::string prev = PreviousMetadataPath(dir, save_id);
    if (PathExists(prev)) RenameFile(prev, JoinPath(dir, kMetadataFileName));
  } catch (...) {
    // Best effort: the error being reported is the save's own; DIR stays incomplete, never wrong.
  }
}

// Coordinator, in the writing phase (off the caller's thread for async saves): drop data and temporary
// files of earlier saves. Files named like this save's are left alone: the renames replace them.
void RemoveStaleFiles(const std::string& dir, const std::string& save_id, int world_size) {
  const std::string first = DataFileName(0, world_size);
  const std::string ours = first.substr(first.find("-of-"));  // "-of-00004.safetensors"
  for (const std::string& name : ListDir(dir)) {
    const bool this_save_tmp =
        name.find(".tmp-" + save_id) != std::string::npos || name.find(".prev-" + save_id) != std::string::npos;
    const bool this_world =
        name.size() >= ours.size() && name.compare(name.size() - ours.size(), ours.size(), ours) == 0;
    if (IsOurDataOrTemp(name) && !this_save_tmp && !this_world) RemoveFileIfExists(JoinPath(dir, name));
  }
}

void Stage(const PreparedSave& p, SaveStage s) {
  if (p.options.on_stage) p.options.on_stage(s);
}

// Bytes of one data item, contiguous host memory (a staged copy for a non-contiguous or device local
// tensor: CopyInto brings device tensors over through pinned staging, core/tensor/device_copy.h).
std::pair<const void*, int64_t> ItemBytes(const SaveEntry& e, Tensor* staging) {
  if (e.kind == ItemKind::kBytes) return {e.bytes.data(), static_cast<int64_t>(e.bytes.size())};
  Tensor t = e.shard.local;
  if (!t.is_contiguous() || !t.device().is_cpu()) {
    memory::LedgerScope ledger(memory::Ledger::kOther);
    *staging = Empty(t.sizes(), t.dtype());
    CopyInto(*staging, t);
    t = *staging;
  }
  return {t.raw_data(), t.numel() * ElementSize(t.dtype())};
}

// Hashes and writes `n` bytes piece by piece, so each piece is still in cache when it is written
// (one pass over memory instead of two).
void WriteHashed(File& f, const char* data, int64_t n, int64_t block, std::vector<uint64_t>* sums) {
  const int64_t piece = std::max<int64_t>(1, (int64_t{1} << 20) / block) * block;
  for (int64_t at = 0; at < n; at += piece) {
    const int64_t len = std::min(piece, n - at);
    for (uint64_t s : BlockChecksums(data + at, len, block)) sums->push_back(s);
    f.Write(data + at, len);
  }
}

std::string EntryName(const SaveEntry& e) {
  if (e.kind == ItemKind::kBytes || e.shard.box == FullBox(e.shard.global_shape)) return e.fqn;
  return e.fqn + BoxToString(e.shard.box);
}

std::string TmpPath(const PreparedSave& p) {
  return JoinPath(p.dir, DataFileName(p.rank, p.world_size) + ".tmp-" + p.save_id);
}

// Phase 1: this rank's data file, complete and fsynced, under its temporary name.
RankWriteResult WriteTmpFile(const PreparedSave& p) {
  RankWriteResult result;
  std::vector<const SaveEntry*> items;
  std::vector<SafetensorsEntry> header;
  for (int i : p.global.writes[static_cast<size_t>(p.rank)]) {
    const SaveEntry& e = p.entries[static_cast<size_t>(i)];
    if (e.kind == ItemKind::kValue) continue;
    items.push_back(&e);
    if (e.kind == ItemKind::kBytes) {
      header.push_back({EntryName(e), "U8", {static_cast<int64_t>(e.bytes.size())}});
    } else {
      header.push_back({EntryName(e), std::string(SafetensorsDTypeName(e.shard.dtype)), e.shard.box.sizes});
    }
  }
  if (items.empty()) return result;
  result.file = DataFileName(p.rank, p.world_size);
  const std::string tmp = TmpPath(p);
  const std::string prefix = EncodeSafetensorsHeader(header, {{"format", "tessel"},
                                                              {"save_id", p.save_id},
                                                              {"rank", std::to_string(p.rank)},
                                                              {"world_size", std::to_string(p.world_size)}});
  File f = File::Create(tmp);
  f.Write(prefix.data(), static_cast<int64_t>(prefix.size()));
  for (size_t k = 0; k < items.size(); ++k) {
    Tensor staging;
    const auto [data, n] = ItemBytes(*items[k], &staging);
    TESSEL_INTERNAL_ASSERT(n == header[k].nbytes(), "save: item size changed for ", items[k]->fqn);
    StoredRange r{0, header[k].name, f.write_position(), n, {}};
    WriteHashed(f, static_cast<const char*>(data), n, p.options.checksum_block_bytes, &r.checksums);
    result.ranges.push_back(std::move(r));
  }
  result.file_size = f.write_position();
  if (p.options.fsync) f.Sync();
  f.Close();
  Stage(p, SaveStage::kDataWritten);
  return result;
}

// Phase 2 (every rank wrote its file): final names. Replaces the previous checkpoint's files.
void RenameDataFile(const PreparedSave& p, const RankWriteResult& mine) {
  if (p.rank == 0) RemoveStaleFiles(p.dir, p.save_id, p.world_size);
  const std::string final_path = JoinPath(p.dir, DataFileName(p.rank, p.world_size));
  if (mine.file.empty()) {
    RemoveFileIfExists(final_path);  // nothing to write: drop this rank's file of an earlier save
  } else {
    RenameFile(TmpPath(p), final_path);
  }
  Stage(p, SaveStage::kDataRenamed);
}

Metadata BuildMetadata(const PreparedSave& p, const std::vector<RankWriteResult>& results) {
  Metadata m;
  m.save_id = p.save_id;
  m.world_size = p.world_size;
  m.checksum_block_bytes = p.options.checksum_block_bytes;
  for (const LocalSavePlan& plan : p.plans) {
    for (const WriteItem& it : plan.items) {
      if (it.kind == ItemKind::kTensor && !m.tensors.count(it.fqn)) {
        m.tensors[it.fqn] = TensorMeta{it.dtype, it.global_shape, it.layout, {}};
      }
    }
  }
  for (int r = 0; r < p.world_size; ++r) {
    const RankWriteResult& res = results[static_cast<size_t>(r)];
    const int file = static_cast<int>(m.files.size());
    if (!res.file.empty()) m.files.push_back({res.file, r, res.file_size});
    size_t k = 0;
    for (int i : p.global.writes[static_cast<size_t>(r)]) {
      const WriteItem& it = p.plans[static_cast<size_t>(r)].items[static_cast<size_t>(i)];
      if (it.kind == ItemKind::kValue) {
        m.values[it.fqn] = it.value;
        continue;
      }
      StoredRange where = res.ranges.at(k++);
      where.file = file;
      if (it.kind == ItemKind::kBytes) {
        m.bytes[it.fqn] = std::move(where);
      } else {
        m.tensors[it.fqn].chunks.push_back({it.box, std::move(where)});
      }
    }
  }
  for (auto& [fqn, t] : m.tensors) {
    std::sort(t.chunks.begin(), t.chunks.end(),
              [](const ChunkMeta& a, const ChunkMeta& b) { return a.box.offsets < b.box.offsets; });
  }
  return m;
}

void CommitMetadata(const PreparedSave& p, const Metadata& m) {
  if (p.options.fsync) SyncDir(p.dir);  // every rank's rename happened before its result was sent
  const std::string path = JoinPath(p.dir, kMetadataFileName);
  const std::string tmp = path + ".tmp-" + p.save_id;
  const std::string text = MetadataToJson(m);
  File f = File::Create(tmp);
  f.Write(text.data(), static_cast<int64_t>(text.size()));
  if (p.options.fsync) f.Sync();
  f.Close();
  Stage(p, SaveStage::kMetadataWritten);
  RenameFile(tmp, path);
  if (p.options.fsync) SyncDir(p.dir);
  RemoveFileIfExists(PreviousMetadataPath(p.dir, p.save_id));
}

}  // namespace

std::vector<std::string> AllGatherStrings(const comm::ProcessGroupPtr& pg, const std::string& mine) {
  if (pg == nullptr || pg->size() == 1) return {mine};
  const int w = pg->size();
  Tensor len = FromVector<int64_t>({static_cast<int64_t>(mine.size())});
  Tensor lens = Empty({w}, DType::kInt64);
  pg->AllGather(lens, len)->Wait();
  int64_t max_len = 0;
  for (int64_t l : lens.ToVector<int64_t>()) max_len = std::max(max_len, l);
  const int64_t words = std::max<int64_t>(1, (max_len + 7) / 8);
  Tensor payload = Zeros({words}, DType::kInt64);
  std::memcpy(payload.raw_data(), mine.data(), mine.size());
  Tensor all = Empty({w * words}, DType::kInt64);
  pg->AllGather(all, payload)->Wait();
  std::vector<std::string> out;
  const std::vector<int64_t> l = lens.ToVector<int64_t>();
  for (int r = 0; r < w; ++r) {
    out.emplace_back(static_cast<const char*>(all.raw_data()) + r * words * 8,
                     static_cast<size_t>(l[static_cast<size_t>(r)]));
  }
  return out;
}

PreparedSave PrepareSave(const StateDict& state_dict, const std::string& dir, const comm::ProcessGroupPtr& pg,
                         const SaveOptions& options) {
  PreparedSave p;
  p.dir = dir;
  p.rank = pg ? pg->rank() : 0;
  p.world_size = pg ? pg->size() : 1;
  p.options = options;
  LocalSavePlan mine;
  std::exception_ptr err;
  mine.error = Capture(
      [&] {
        TESSEL_CHECK_CODE(ErrorCode::kAborted, options.local_error.empty(), options.local_error);
        TESSEL_CHECK(options.checksum_block_bytes > 0 && options.checksum_block_bytes % 8 == 0,
                     "checkpoint save: checksum_block_bytes must be a positive multiple of 8, got ",
                     options.checksum_block_bytes);
        Normalize(state_dict, p.rank, &p.entries, &mine);
        if (p.rank == 0) {
          mine.save_id = NewSaveId();
          p.lock.emplace(SetUpDirectory(dir, mine.save_id, options.fsync));
        }
      },
      &err);
  for (const std::string& s : AllGatherStrings(pg, EncodeLocalPlan(mine))) p.plans.push_back(DecodeLocalPlan(s));
  std::vector<std::string> errors;
  for (const LocalSavePlan& plan : p.plans) errors.push_back(plan.error);
  p.save_id = p.plans[0].save_id;
  try {
    ThrowIfAnyFailed("planning", errors, p.rank, err);
    p.global = PlanGlobalSave(p.plans);  // pure and identical on every rank: all throw alike
  } catch (...) {
    if (p.rank == 0 && p.lock) RestorePrevious(dir, p.save_id);
    throw;
  }
  Stage(p, SaveStage::kPlanned);
  return p;
}

void AgreeBeforeWriting(PreparedSave& p, const comm::ProcessGroupPtr& pg, std::exception_ptr mine) {
  std::string my_error;
  if (mine) {
    try {
      std::rethrow_exception(mine);
    } catch (const std::exception& e) {
      my_error = e.what();
    } catch (...) {
      my_error = "unknown exception";
    }
  }
  const std::vector<std::string> errors = AllGatherStrings(pg, my_error);
  if (std::all_of(errors.begin(), errors.end(), [](const std::string& e) { return e.empty(); })) return;
  if (p.rank == 0 && p.lock) RestorePrevious(p.dir, p.save_id);
  p.lock.reset();
  ThrowIfAnyFailed("staging its snapshot", errors, p.rank, mine);
}

SaveResult FinishSave(PreparedSave& p, const comm::ProcessGroupPtr& pg) {
  RankWriteResult mine;
  std::exception_ptr err;
  mine.error = Capture([&] { mine = WriteTmpFile(p); }, &err);
  std::vector<RankWriteResult> results;
  std::vector<std::string> errors;
  for (const std::string& s : AllGatherStrings(pg, EncodeResult(mine))) {
    results.push_back(DecodeResult(s));
    errors.push_back(results.back().error);
  }
  try {
    ThrowIfAnyFailed("writing its data file", errors, p.rank, err);
  } catch (...) {  // no data file was replaced yet: the previous checkpoint stays loadable
    std::exception_ptr ignored;
    Capture([&] { RemoveFileIfExists(TmpPath(p)); }, &ignored);
    if (p.rank == 0) RestorePrevious(p.dir, p.save_id);
    throw;
  }
  const std::string rename_error = Capture([&] { RenameDataFile(p, mine); }, &err);
  ThrowIfAnyFailed("renaming its data file", AllGatherStrings(pg, rename_error), p.rank, err);
  std::string commit_error;
  if (p.rank == 0) commit_error = Capture([&] { CommitMetadata(p, BuildMetadata(p, results)); }, &err);
  ThrowIfAnyFailed("committing metadata.json", AllGatherStrings(pg, commit_error), p.rank, err);
  p.lock.reset();
  Stage(p, SaveStage::kCommitted);
  SaveResult out{p.save_id, mine.file, 0, 0};
  for (int i : p.global.writes[static_cast<size_t>(p.rank)]) {
    out.bytes_written += p.plans[static_cast<size_t>(p.rank)].items[static_cast<size_t>(i)].nbytes;
  }
  for (int64_t b : p.global.bytes_per_rank) out.total_bytes += b;
  return out;
}

}  // namespace tessel::checkpoint::internal
