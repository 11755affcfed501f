// checkpoint/cli.h — the `tessel-ckpt` command: inspect, verify and export checkpoint directories.
//
//   tessel-ckpt inspect DIR                  table: FQN, dtype, global shape, chunks, bytes, saved layout
//   tessel-ckpt verify DIR                   every checksum; exit 1 listing each problem
//   tessel-ckpt export DIR OUT.safetensors   one safetensors file of full tensors
//
// Invariant: RunTesselCkpt never throws; it prints to `out`/`err` and returns the exit code (0 ok,
// 1 a checkpoint problem or error, 2 bad usage), so the binary is a two-line main and tests call it.
//
// Example:
//   std::ostringstream out, err;
//   int rc = RunTesselCkpt({"inspect", "/ckpt/step_100"}, out, err);
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace tessel::checkpoint {

// The inspect report of DIR (throws like ReadMetadata on a bad directory).
std::string InspectCheckpoint(const std::string& dir);
int RunTesselCkpt(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tessel::checkpoint
