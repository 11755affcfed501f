// comm/process_group.cc — ReduceOp names and the default (unsupported) BatchP2P.
#include "comm/process_group.h"

#include "core/base/error.h"

namespace tessel::comm {

std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kProduct: return "product";
  }
  return "unknown";
}

WorkPtr ProcessGroup::BatchP2P(const std::vector<P2POp>& /*ops*/) {
  TESSEL_FAIL(ErrorCode::kUnimplemented, "batch_p2p: the ", backend_name(), " backend does not implement it");
}

}  // namespace tessel::comm
