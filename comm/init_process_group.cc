// comm/init_process_group.cc — gloo or nccl from the environment, per comm/backend_choice.h.
#include "comm/init_process_group.h"

#include <cstdlib>

#include "comm/backend_choice.h"
#include "comm/backends/gloo.h"
#include "core/base/error.h"
#ifdef TESSEL_HAVE_NCCL
#include "comm/backends/nccl.h"
#endif

namespace tessel::comm {

bool NcclBuilt() {
#ifdef TESSEL_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

ProcessGroupPtr InitProcessGroupForDevice(Device device) {
  const Backend backend = ChooseRankBackend(std::getenv("TESSEL_BACKEND"), device);
  if (backend == Backend::kGloo) return InitProcessGroupFromEnv();
#ifdef TESSEL_HAVE_NCCL
  return InitNcclProcessGroupFromEnv();
#else
  TESSEL_FAIL(ErrorCode::kUnimplemented, "backend nccl for tensors on ", device,
              ": this tessel was built without a CUDA toolkit, so the nccl backend is not compiled in (rebuild ",
              "on a machine with CUDA, or --config=cuda)");
#endif
}

}  // namespace tessel::comm
