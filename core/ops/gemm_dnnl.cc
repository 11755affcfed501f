// core/ops/gemm_dnnl.cc — DnnlBf16Gemm on oneDNN 2.6's matmul primitive, with a primitive cache.
//
// NOTE: AMX. oneDNN 2.6.3 enables AMX by default and requests the Linux tile-data permission itself,
// so ONEDNN_MAX_CPU_ISA is not set (measured on an Intel Xeon, family 6 model 143/167: the matmul
// picks "brg:avx512_core_amx_bf16" with no environment). A user may still cap the ISA with that
// variable (bf16 then falls back to the fp32 path when AMX is excluded: gemm_bf16_isa_test).
//
// NOTE: threads. Debian builds oneDNN on OpenMP; each call runs with the calling thread's OpenMP
// budget set to 1 (restored afterwards), so no libgomp team spins against tessel's worker pool and
// gemm.cc splits large products over tessel's threads as it does for OpenBLAS.
#include "core/ops/gemm_dnnl.h"

#include <omp.h>

#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

namespace tessel {
namespace {

using Dims = dnnl::memory::dims;
using DT = dnnl::memory::data_type;

// Caps the calling thread's OpenMP team at one thread while in scope.
class OneOmpThread {
 public:
  OneOmpThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneOmpThread() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

const dnnl::engine& Engine() {
  static const dnnl::engine kEngine(dnnl::engine::kind::cpu, 0);
  return kEngine;
}

// m, n, k, a's strides, b's strides, ldc, accumulate.
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;

struct Primitive {
  dnnl::matmul matmul;
  dnnl::memory::desc a, b, c, scratch;
};

// At most this many shapes are cached; a full cache is emptied (training uses a few dozen shapes).
constexpr size_t kMaxCached = 4096;

struct Cache {
  std::mutex mu;
  std::map<Key, std::shared_ptr<const Primitive>> entries;  // nullptr: oneDNN has no kernel for the key
  std::string last_impl;
};

Cache& TheCache() {
  static Cache* cache = new Cache();  // leaked: primitives may be used while statics are destroyed
  return *cache;
}

std::shared_ptr<const Primitive> Create(const MatRef& a, const MatRef& b, int64_t ldc, bool accumulate,
                                        std::string* impl) {
  auto p = std::make_shared<Primitive>();
  p->a = dnnl::memory::desc(Dims{a.rows, a.cols}, DT::bf16, Dims{a.row_stride, a.col_stride});
  p->b = dnnl::memory::desc(Dims{b.rows, b.cols}, DT::bf16, Dims{b.row_stride, b.col_stride});
  p->c = dnnl::memory::desc(Dims{a.rows, b.cols}, DT::f32, Dims{ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p->a, p->b, p->c), attr, Engine());
    *impl = pd.impl_info_str();
    p->scratch = pd.scratchpad_desc();
    p->matmul = dnnl::matmul(pd);
  } catch (const dnnl::error&) {
    return nullptr;  // no implementation for this case on this CPU
  }
  return p;
}

std::shared_ptr<const Primitive> Lookup(const MatRef& a, const MatRef& b, int64_t ldc, bool accumulate) {
  const Key key{a.rows, b.cols, a.cols, a.row_stride, a.col_stride, b.row_stride, b.col_stride, ldc, accumulate};
  Cache& cache = TheCache();
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.entries.find(key);
    if (it != cache.entries.end()) return it->second;
  }
  std::string impl;
  std::shared_ptr<const Primitive> p = Create(a, b, ldc, accumulate, &impl);  // outside the lock
  std::lock_guard<std::mutex> lock(cache.mu);
  if (cache.entries.size() >= kMaxCached) cache.entries.clear();
  if (!impl.empty()) cache.last_impl = impl;
  return cache.entries.emplace(key, p).first->second;
}

}  // namespace

std::string DnnlIsa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::sse41: return "sse41";
    default: return "other";
  }
}

bool DnnlHasFastBf16() {
  static const bool kFast = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto amx = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
    return (isa & amx) == amx;
  }();
  return kFast;
}

bool DnnlBf16Gemm(const MatRef& a, const MatRef& b, float* c, int64_t ldc, bool accumulate) {
  const OneOmpThread one_thread;
  const std::shared_ptr<const Primitive> p = Lookup(a, b, ldc, accumulate);
  if (!p) return false;
  thread_local std::unique_ptr<dnnl::stream> stream;
  thread_local std::vector<char> scratch;
  if (!stream) stream = std::make_unique<dnnl::stream>(Engine());
  if (scratch.size() < p->scratch.get_size()) scratch.resize(p->scratch.get_size());
  const dnnl::memory ma(p->a, Engine(), const_cast<void*>(a.data));
  const dnnl::memory mb(p->b, Engine(), const_cast<void*>(b.data));
  const dnnl::memory mc(p->c, Engine(), c);
  const dnnl::memory ms(p->scratch, Engine(), scratch.data());
  p->matmul.execute(*stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, ms}});
  stream->wait();
  return true;
}

std::string DnnlBf16Impl() {
  Cache& cache = TheCache();
  std::lock_guard<std::mutex> lock(cache.mu);
  return cache.last_impl;
}

}  // namespace tessel
