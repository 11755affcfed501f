// checkpoint/save.cc — Save = PrepareSave + FinishSave on the caller's thread and group.
#include "checkpoint/save.h"

#include "checkpoint/internal/save_engine.h"

namespace tessel::checkpoint {

SaveResult Save(const StateDict& state_dict, const std::string& dir, const comm::ProcessGroupPtr& world,
                const SaveOptions& options) {
  internal::PreparedSave p = internal::PrepareSave(state_dict, dir, world, options);
  return internal::FinishSave(p, world);
}

}  // namespace tessel::checkpoint
