// checkpoint/internal/load_engine.h — the load engine behind Load (a checkpoint directory) and
// ImportSafetensors (one safetensors file described as a one-file Metadata without checksums).
// Not a public header.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/load.h"
#include "checkpoint/metadata.h"

namespace tessel::checkpoint::internal {

// paths[i] is the path of md.files[i]; `source` names the checkpoint in errors.
LoadResult LoadFromMetadata(StateDict& state_dict, const Metadata& md, std::vector<std::string> paths,
                            const LoadOptions& options, const std::string& source);

}  // namespace tessel::checkpoint::internal
