// examples/gpt/corpus.h — the training text: generated, deterministic, no downloads.
//
// Invariant: GenerateCorpus(seed, n) returns the same n bytes for the same seed on every machine: a
// small English-like language (subject–verb–object sentences with adjectives, adverbs and clauses drawn
// from fixed word lists by a counter-based RNG). Byte-level: the vocabulary is the 256 byte values.
//
// Example:
//   std::string text = GenerateCorpus(/*seed=*/1, /*num_bytes=*/1 << 20);
//   Batch b = SampleBatch(text, /*batch=*/16, /*seq=*/64, /*step=*/0, gen_seed);
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor/tensor.h"

namespace tessel::examples {

std::string GenerateCorpus(uint64_t seed, int64_t num_bytes);

// The main job's text: the bytes of the file at `path` (--data=FILE: any text, byte-level), or the
// generated corpus of 1 MiB when `path` is empty. Throws kInvalidArgument naming the file when it cannot
// be read or is empty (SampleBatch then checks it is longer than a sequence).
std::string LoadCorpus(const std::string& path, uint64_t seed);

struct Batch {
  Tensor idx_BT;      // int64 [B, T]: bytes at positions p .. p+T-1
  Tensor targets_BT;  // int64 [B, T]: bytes at positions p+1 .. p+T
};
// Batch `step` of a deterministic stream of random windows (reproducible from (seed, step)).
Batch SampleBatch(const std::string& text, int64_t batch, int64_t seq, int64_t step, uint64_t seed);

}  // namespace tessel::examples
