// checkpoint/internal/chunk_reader.cc — verified positional reads of saved chunks.
#include "checkpoint/internal/chunk_reader.h"

#include <algorithm>
#include <cstring>

#include "checkpoint/checksum.h"
#include "checkpoint/safetensors.h"
#include "core/base/error.h"
#include "core/memory/allocator.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::checkpoint::internal {
namespace {

// Read granularity without checksums: runs closer than this are read together.
constexpr int64_t kUnverifiedGranule = 4096;
// Verified reads go in pieces that stay in cache until they are hashed (one pass over DRAM, not two).
constexpr int64_t kCacheFriendlyReadBytes = int64_t{1} << 20;

int64_t LinearIndex(const Shape& offsets, const Shape& strides) {
  int64_t idx = 0;
  for (size_t d = 0; d < offsets.size(); ++d) idx += offsets[d] * strides[d];
  return idx;
}

Shape Sub(const Shape& a, const Shape& b) {
  Shape out(a.size());
  for (size_t d = 0; d < a.size(); ++d) out[d] = a[d] - b[d];
  return out;
}

// Calls fn(first_element, num_elements) for each maximal contiguous run of `region` (chunk-relative
// offsets/sizes) inside a row-major chunk of `chunk_sizes`.
template <typename Fn>
void ForEachRun(const Box& region, const Shape& chunk_sizes, Fn fn) {
  const size_t n = region.sizes.size();
  const Shape strides = ContiguousStrides(chunk_sizes);
  size_t j = n;  // dims [j, n) are merged into one run
  int64_t run = 1;
  while (j > 0) {
    run *= region.sizes[j - 1];
    --j;
    if (region.sizes[j] != chunk_sizes[j]) break;
  }
  Shape idx(j, 0);
  while (true) {
    Shape at = region.offsets;
    for (size_t d = 0; d < j; ++d) at[d] += idx[d];
    fn(LinearIndex(at, strides), run);
    size_t d = j;
    while (d > 0 && ++idx[d - 1] == region.sizes[d - 1]) idx[--d] = 0;
    if (d == 0) return;
  }
}

}  // namespace

ChunkReader::ChunkReader(const Metadata& md, std::vector<std::string> paths, bool verify, int64_t max_staging_bytes)
    : md_(md), paths_(std::move(paths)), verify_(verify), max_staging_bytes_(max_staging_bytes) {
  TESSEL_INTERNAL_ASSERT(paths_.size() == md_.files.size(), "one path per data file");
}

const File& ChunkReader::Open(int file, const std::string& what) {
  auto it = files_.find(file);
  if (it != files_.end()) return it->second;
  const std::string& path = paths_[static_cast<size_t>(file)];
  TESSEL_CHECK_CODE(ErrorCode::kNotFound, PathExists(path), "checkpoint load: data file '", path, "' needed for ", what,
                    " is missing. HINT: the checkpoint directory is incomplete; copy the whole directory");
  File f = File::OpenForRead(path);
  const FileMeta& fm = md_.files[static_cast<size_t>(file)];
  if (fm.size >= 0) {
    TESSEL_CHECK_CODE(ErrorCode::kDataLoss, f.Size() == fm.size, "checkpoint load: data file '", path, "' (needed for ",
                      what, ") has ", f.Size(), " bytes but the metadata recorded ", fm.size, " (",
                      f.Size() < fm.size ? "truncated" : "extended or replaced", ")");
  }
  if (!md_.save_id.empty()) {
    const SafetensorsHeader h = ReadSafetensorsHeader(f);
    auto id = h.metadata.find("save_id");
    const std::string found = id == h.metadata.end() ? "<none>" : id->second;
    TESSEL_CHECK_CODE(ErrorCode::kDataLoss, found == md_.save_id, "checkpoint load: data file '", path,
                      "' (needed for ", what, ") was written by save ", found, " but metadata.json belongs to save ",
                      md_.save_id, ": two saves raced into this directory, or files were mixed. HINT: re-save");
  }
  return files_.emplace(file, std::move(f)).first->second;
}

void ChunkReader::VerifyBlock(const std::string& what, const StoredRange& r, int64_t block, const char* data) {
  const int64_t b = md_.checksum_block_bytes;
  const int64_t start = block * b;
  const int64_t len = std::min(b, r.byte_length - start);
  const uint64_t got = Checksum(data, len);
  const uint64_t want = r.checksums[static_cast<size_t>(block)];
  TESSEL_CHECK_CODE(ErrorCode::kDataLoss, got == want, "checkpoint load: checksum mismatch in '",
                    paths_[static_cast<size_t>(r.file)], "' for ", what, " (entry '", r.entry, "'), block ", block,
                    " = file bytes [", r.byte_offset + start, ", ", r.byte_offset + start + len, "): expected ",
                    ChecksumToHex(want), ", got ", ChecksumToHex(got),
                    ". The file is corrupt. HINT: run `tessel-ckpt verify` on the directory");
}

void ChunkReader::ReadRange(const std::string& what, const StoredRange& r, int64_t begin, int64_t end, char* dst) {
  const File& f = Open(r.file, what);
  if (begin >= end) return;
  if (!verify_) {
    f.ReadAt(r.byte_offset + begin, dst, end - begin);
    bytes_read_ += end - begin;
    return;
  }
  const int64_t b = md_.checksum_block_bytes;
  int64_t k = begin / b;
  std::vector<char> edge;
  while (k * b < end) {
    const int64_t bs = k * b;
    const int64_t be = std::min(bs + b, r.byte_length);
    if (bs >= begin && be <= end) {  // whole blocks: straight into dst, verified while still in cache
      int64_t last = k;
      while ((last + 1) * b < end && std::min((last + 2) * b, r.byte_length) <= end &&
             (last + 2 - k) * b <= kCacheFriendlyReadBytes) {
        ++last;
      }
      const int64_t run_end = std::min((last + 1) * b, r.byte_length);
      f.ReadAt(r.byte_offset + bs, dst + (bs - begin), run_end - bs);
      bytes_read_ += run_end - bs;
      for (int64_t q = k; q <= last; ++q) VerifyBlock(what, r, q, dst + (q * b - begin));
      k = last + 1;
      continue;
    }
    // A block only partly needed: read it whole, verify, copy the needed part.
    edge.resize(static_cast<size_t>(be - bs));
    f.ReadAt(r.byte_offset + bs, edge.data(), be - bs);
    bytes_read_ += be - bs;
    VerifyBlock(what, r, k, edge.data());
    const int64_t lo = std::max(bs, begin);
    const int64_t hi = std::min(be, end);
    std::memcpy(dst + (lo - begin), edge.data() + (lo - bs), static_cast<size_t>(hi - lo));
    ++k;
  }
}

void ChunkReader::CopySlab(const std::string& what, DType dtype, const ChunkMeta& c, const Box& slab,
                           const LocalShard& dst) {
  const int64_t es = ElementSize(dtype);
  const Shape cst = ContiguousStrides(c.box.sizes);
  const Box rel{Sub(slab.offsets, c.box.offsets), slab.sizes};
  Shape last_idx = rel.offsets;
  for (size_t d = 0; d < last_idx.size(); ++d) last_idx[d] += slab.sizes[d] - 1;
  const int64_t first = LinearIndex(rel.offsets, cst);
  const int64_t last = LinearIndex(last_idx, cst);
  const Tensor view = LocalRegionView(dst, slab);
  // One run on both sides and host memory: no staging. A device destination always stages on the host
  // and lands with CopyInto (device-aware: pinned staging for large copies).
  if (last - first + 1 == Volume(slab) && view.is_contiguous() && view.device().is_cpu()) {
    ReadRange(what, c.where, first * es, (last + 1) * es, static_cast<char*>(view.raw_data()));
    view.impl()->storage().BumpVersion();
    return;
  }
  // Staging mirrors the chunk's bytes [a0, a1); only the granules some run touches are read.
  const int64_t unit = verify_ ? md_.checksum_block_bytes : kUnverifiedGranule;
  const int64_t a0 = first * es / unit * unit;
  const int64_t a1 = std::min(((last + 1) * es + unit - 1) / unit * unit, c.where.byte_length);
  std::vector<char> marks(static_cast<size_t>((a1 - a0 + unit - 1) / unit), 0);
  ForEachRun(rel, c.box.sizes, [&](int64_t e0, int64_t n) {
    for (int64_t u = (e0 * es - a0) / unit; u <= ((e0 + n) * es - 1 - a0) / unit; ++u)
      marks[static_cast<size_t>(u)] = 1;
  });
  Tensor staging;
  {
    memory::LedgerScope ledger(memory::Ledger::kOther);
    staging = Empty({(a1 - a0) / es}, dtype);
  }
  char* base = static_cast<char*>(staging.raw_data());
  for (size_t u = 0; u < marks.size();) {
    if (!marks[u]) {
      ++u;
      continue;
    }
    size_t v = u;
    while (v < marks.size() && marks[v]) ++v;
    const int64_t lo = a0 + static_cast<int64_t>(u) * unit;
    ReadRange(what, c.where, lo, std::min(a0 + static_cast<int64_t>(v) * unit, a1), base + (lo - a0));
    u = v;
  }
  CopyInto(view, MakeView(staging, slab.sizes, cst, (first * es - a0) / es));
}

void ChunkReader::CopyOverlap(const std::string& fqn, DType dtype, const ChunkMeta& c, const Box& overlap,
                              const LocalShard& dst) {
  const std::string what = "'" + fqn + "' chunk " + BoxToString(c.box);
  TESSEL_INTERNAL_ASSERT(dst.local.dtype() == dtype, "load: dtype checked before reading");
  if (overlap.sizes.empty()) return CopySlab(what, dtype, c, overlap, dst);
  const int64_t row_bytes = NumElements(Shape(c.box.sizes.begin() + 1, c.box.sizes.end())) * ElementSize(dtype);
  const int64_t rows_per_slab = std::max<int64_t>(1, max_staging_bytes_ / std::max<int64_t>(1, row_bytes));
  const int64_t end = overlap.offsets[0] + overlap.sizes[0];
  for (int64_t r0 = overlap.offsets[0]; r0 < end; r0 += rows_per_slab) {
    Box slab = overlap;
    slab.offsets[0] = r0;
    slab.sizes[0] = std::min(rows_per_slab, end - r0);
    CopySlab(what, dtype, c, slab, dst);
  }
}

std::string ChunkReader::ReadBytes(const std::string& fqn, const StoredRange& r) {
  std::string s(static_cast<size_t>(r.byte_length), '\0');
  ReadRange("bytes '" + fqn + "'", r, 0, r.byte_length, s.data());
  return s;
}

void ChunkReader::VerifyRange(const std::string& what, const StoredRange& r) {
  TESSEL_INTERNAL_ASSERT(verify_, "VerifyRange needs a verifying reader");
  const int64_t b = md_.checksum_block_bytes;
  const int64_t piece = std::max<int64_t>(1, (int64_t{64} << 20) / b) * b;
  std::vector<char> buf(static_cast<size_t>(std::min(piece, r.byte_length)));
  for (int64_t start = 0; start < r.byte_length; start += piece) {
    ReadRange(what, r, start, std::min(start + piece, r.byte_length), buf.data());
  }
}

}  // namespace tessel::checkpoint::internal
