// core/ops/dnnl_common.cc — DnnlEngine and OneOmpThread (dnnl_common.h).
#include "core/ops/dnnl_common.h"

#include <omp.h>

namespace tessel {

const dnnl::engine& DnnlEngine() {
  static const dnnl::engine kEngine(dnnl::engine::kind::cpu, 0);
  return kEngine;
}

OneOmpThread::OneOmpThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
OneOmpThread::~OneOmpThread() { omp_set_num_threads(saved_); }

}  // namespace tessel
