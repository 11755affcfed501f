// checkpoint/internal/chunk_reader.h — ChunkReader: reads saved chunks (or parts of them) out of a
// checkpoint's data files, verifying block checksums, into local shards.
//
// Invariant: every byte handed to a caller was read from the file the metadata names and, when
// verifying, lies in a block whose XXH3 matched (a partially needed block is read whole). Each data
// file is opened once and checked before its first read: it exists (kNotFound), has the size the
// metadata recorded (kDataLoss: truncated or extended), is a valid safetensors file (kDataLoss) and
// carries the metadata's save id (kDataLoss: written by another save). Every error names the file,
// the FQN that needed it and, for checksum failures, the chunk and block.
// Not a public header: load.h, export.h and cli.h use it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/local_shard.h"
#include "checkpoint/metadata.h"
#include "checkpoint/storage.h"

namespace tessel::checkpoint::internal {

class ChunkReader {
 public:
  // paths[i] is the path of md.files[i]. `max_staging_bytes` bounds the staging buffer of one strided
  // copy (a slab of the overlap); contiguous overlaps are read straight into the destination.
  ChunkReader(const Metadata& md, std::vector<std::string> paths, bool verify, int64_t max_staging_bytes);

  // Copies `overlap` (global coordinates, inside both boxes) of saved chunk `c` into `dst`.
  void CopyOverlap(const std::string& fqn, DType dtype, const ChunkMeta& c, const Box& overlap, const LocalShard& dst);
  std::string ReadBytes(const std::string& fqn, const StoredRange& r);
  // Reads and verifies every block of `r` (tessel-ckpt verify); `what` names it in errors.
  void VerifyRange(const std::string& what, const StoredRange& r);

  // Opens and checks data file `file` (existence, size, save id) without reading data.
  void CheckFile(int file) { Open(file, "the checkpoint"); }

  int64_t bytes_read() const { return bytes_read_; }

 private:
  const File& Open(int file, const std::string& what);
  // Chunk-relative bytes [begin, end) of `r` into dst, reading whole blocks at the edges when verifying.
  void ReadRange(const std::string& what, const StoredRange& r, int64_t begin, int64_t end, char* dst);
  void VerifyBlock(const std::string& what, const StoredRange& r, int64_t block, const char* data);
  void CopySlab(const std::string& what, DType dtype, const ChunkMeta& c, const Box& slab, const LocalShard& dst);

  const Metadata& md_;
  std::vector<std::string> paths_;
  bool verify_;
  int64_t max_staging_bytes_;
  std::map<int, File> files_;
  int64_t bytes_read_ = 0;
};

}  // namespace tessel::checkpoint::internal
