// checkpoint/verify.h — VerifyCheckpoint: read every saved byte of a checkpoint directory and check it
// against the metadata (what `tessel-ckpt verify` runs).
//
// Invariant: a checkpoint passes only if metadata.json parses (this format version), every data file
// exists with the recorded size, is valid safetensors written by the same save, indexes each chunk at
// the recorded offset and length, and every block checksum matches. Problems are collected (one line
// each, naming the file and the FQN), not thrown, so one run lists them all.
//
// Example:
//   VerifyReport r = VerifyCheckpoint("/ckpt/step_100");
//   if (!r.ok()) for (const std::string& p : r.problems) std::cerr << p << "\n";
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::checkpoint {

struct VerifyReport {
  int64_t files_checked = 0;
  int64_t chunks_checked = 0;  // tensor chunks and bytes entries
  int64_t bytes_checked = 0;
  std::vector<std::string> problems;
  bool ok() const { return problems.empty(); }
};

VerifyReport VerifyCheckpoint(const std::string& dir);

}  // namespace tessel::checkpoint
