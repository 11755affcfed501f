// checkpoint/checksum.h — the checksum of checkpoint data: XXH3-64 over fixed-size blocks of a chunk.
//
// Invariant: a chunk of `n` bytes has ceil(n / block_bytes) block checksums; block k covers chunk bytes
// [k * block_bytes, min((k + 1) * block_bytes, n)). A loader that needs only part of a chunk reads and
// verifies just the blocks it touches, so partial reads stay verified (metadata.h records block_bytes).
//
// Why XXH3-64 (libxxhash) and not zlib's crc32: every saved byte is hashed once at save time and every
// loaded byte once at load time, so the checksum must run far above storage speed. XXH3 hashes at
// tens of GB/s per core (vectorized), about an order of magnitude faster than zlib 1.2's crc32; its
// 64-bit output also makes an accidental match on a corrupted block far less likely than a 32-bit CRC.
// Corruption detection, not authentication: neither is a cryptographic hash.
//
// Example:
//   std::vector<uint64_t> sums = BlockChecksums(data, nbytes, 1 << 20);
//   std::string hex = ChecksumToHex(sums[0]);          // "0f3a...": 16 lowercase hex digits
//   std::optional<uint64_t> back = ChecksumFromHex(hex);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessel::checkpoint {

inline constexpr int64_t kDefaultChecksumBlockBytes = int64_t{1} << 20;

uint64_t Checksum(const void* data, int64_t nbytes);
// Number of blocks of a chunk of `nbytes` (0 for an empty chunk).
int64_t NumChecksumBlocks(int64_t nbytes, int64_t block_bytes);
// One checksum per block, computed in parallel over blocks for large chunks.
std::vector<uint64_t> BlockChecksums(const void* data, int64_t nbytes, int64_t block_bytes);
std::string ChecksumToHex(uint64_t sum);
// nullopt unless `hex` is exactly 16 hex digits.
std::optional<uint64_t> ChecksumFromHex(std::string_view hex);

}  // namespace tessel::checkpoint
