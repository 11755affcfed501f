// checkpoint/export.h — portable weights: export a checkpoint to one safetensors file of full tensors,
// and import a safetensors file into a state dict of any layout.
//
// Invariant: memory stays bounded by one tensor. Export assembles one full tensor at a time (verified
// chunks) and streams it to the output, which appears atomically (temporary name, then rename). Import
// reads, per rank and per tensor, only the bytes of that rank's box, straight from the file.
// The exported file is plain safetensors: tensors named by FQN, "__metadata__" with "format": "pt",
// "tessel.save_id" and each small value as "tessel.value.<fqn>" (bytes entries are not exported).
//
// Example:
//   ExportToSafetensors("/ckpt/step_100", "/out/model.safetensors");     // one process
//   comm::RunRanks(2, [&](comm::ProcessGroupPtr world) {                 // any layout
//     StateDict sd = GetModelStateDict(sharded_model);
//     ImportSafetensors(sd, "/out/model.safetensors");
//   });
#pragma once

#include <cstdint>
#include <string>

#include "checkpoint/load.h"
#include "checkpoint/state_dict.h"

namespace tessel::checkpoint {

struct ExportResult {
  int64_t num_tensors = 0;
  int64_t tensor_bytes = 0;
  int64_t num_skipped_bytes_entries = 0;
};

// kInvalidArgument (before reading anything) when out_path lies inside `dir` or inside any directory that
// holds a metadata.json: the export must never overwrite a checkpoint.
ExportResult ExportToSafetensors(const std::string& dir, const std::string& out_path, bool verify_checksums = true);

// Tensors by name (any tessel dtype), U8 tensors into Bytes entries. A requested tensor whose dtype
// tessel lacks (F8_E4M3, U16, ...) raises kUnimplemented naming it. Key checks as in Load, except that by default a
// tensor of the file the state dict lacks is an error (one model's file, loaded as load_state_dict(strict=True)).
LoadResult ImportSafetensors(StateDict& state_dict, const std::string& path,
                             const LoadOptions& options = {.allow_unexpected_keys = false});

}  // namespace tessel::checkpoint
