// core/ops/gemm_dnnl.cc — DnnlBf16Gemm on oneDNN 2.6's matmul primitive, with a primitive cache, and
// DnnlSgemm on its dnnl_sgemm (no primitive to cache: the function JITs its kernels once per process).
//
// NOTE: AMX. oneDNN 2.6.3 enables AMX by default and requests the Linux tile-data permission itself,
// so ONEDNN_MAX_CPU_ISA is not set (measured on an Intel Xeon, family 6 model 143/167: the matmul
// picks "brg:avx512_core_amx_bf16" with no environment). A user may still cap the ISA with that
// variable (bf16 then falls back to the fp32 path when AMX is excluded: gemm_bf16_isa_test).
//
// NOTE: dense operands. oneDNN 2.6's AMX matmul (brgemm) takes operands and output only when they are
// dense (leading dimension equal to the inner extent; operands in either orientation); a padded one —
// a row panel of a transposed operand, a column panel, a strided view, a padded c — silently goes to
// the generic "gemm:jit" bf16 kernel, measured 2–3x slower here. Such an operand is compacted into a
// per-thread buffer first, one memcpy per line: O(rows · cols) against the product's O(m · n · k); a
// padded c is computed in a dense buffer and copied out (gemm.cc never splits bf16 by columns).
//
// NOTE: threads. Debian builds oneDNN on OpenMP; each call runs with the calling thread's OpenMP
// budget set to 1 (restored afterwards), so no libgomp team spins against tessel's worker pool and
// gemm.cc splits large products over tessel's threads as it does for OpenBLAS.
#include "core/ops/gemm_dnnl.h"

#include <cstring>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "core/base/error.h"
#include "core/ops/dnnl_common.h"

namespace tessel {
namespace {

using Dims = dnnl::memory::dims;
using DT = dnnl::memory::data_type;


// m, n, k, a's strides, b's strides, ldc, accumulate.
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;

struct Primitive {
  dnnl::matmul matmul;
  dnnl::memory::desc a, b, c, scratch;
  std::string impl;  // e.g. "brg:avx512_core_amx_bf16"
};

// At most this many shapes are cached; a full cache is emptied (training uses a few dozen shapes). An
// entry is nullptr where oneDNN has no kernel for the key.
PrimitiveCache<Key, Primitive>& TheCache() {
  static auto* cache = new PrimitiveCache<Key, Primitive>(4096);  // leaked: used while statics are destroyed
  return *cache;
}

std::shared_ptr<const Primitive> Create(const MatRef& a, const MatRef& b, int64_t ldc, bool accumulate) {
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
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p->a, p->b, p->c), attr, DnnlEngine());
    p->impl = pd.impl_info_str();
    p->scratch = pd.scratchpad_desc();
    p->matmul = dnnl::matmul(pd);
  } catch (const dnnl::error&) {
    return nullptr;  // no implementation for this case on this CPU
  }
  return p;
}

std::shared_ptr<const Primitive> Lookup(const MatRef& a, const MatRef& b, int64_t ldc, bool accumulate) {
  const Key key{a.rows, b.cols, a.cols, a.row_stride, a.col_stride, b.row_stride, b.col_stride, ldc, accumulate};
  return TheCache().Get(key, [&] { return Create(a, b, ldc, accumulate); });
}

// The operand itself when dense, else a dense copy in `buf` (same orientation). m is row-major
// (col_stride 1) or column-major (row_stride 1), as gemm.cc passes it.
MatRef Dense(const MatRef& m, std::vector<uint16_t>& buf) {
  const bool row_major = m.col_stride == 1;
  const int64_t lines = row_major ? m.rows : m.cols, extent = row_major ? m.cols : m.rows;
  const int64_t ld = row_major ? m.row_stride : m.col_stride;
  const MatRef dense = row_major ? MatRef{m.data, m.rows, m.cols, m.cols, 1} : MatRef{m.data, m.rows, m.cols, 1, m.rows};
  if (ld == extent || lines == 1) return dense;
  buf.resize(static_cast<size_t>(lines * extent));
  const auto* src = static_cast<const uint16_t*>(m.data);
  for (int64_t i = 0; i < lines; ++i) std::memcpy(buf.data() + i * extent, src + i * ld, extent * sizeof(uint16_t));
  MatRef out = dense;
  out.data = buf.data();
  return out;
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
    const auto has = [&](dnnl::cpu_isa want) {
      return (isa & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
    };
    __builtin_cpu_init();  // the vendor from cpuid, as vector_isa.cc reads the features
    return has(dnnl::cpu_isa::avx512_core_amx) || (has(dnnl::cpu_isa::avx512_core_bf16) && __builtin_cpu_is("amd"));
  }();
  return kFast;
}

bool DnnlBf16Gemm(const MatRef& a_in, const MatRef& b_in, float* c, int64_t ldc, bool accumulate) {
  const OneOmpThread one_thread;
  thread_local std::vector<uint16_t> a_buf, b_buf;
  const MatRef a = Dense(a_in, a_buf), b = Dense(b_in, b_buf);
  const int64_t m = a.rows, n = b.cols;
  if (ldc != n && m > 1) {  // a padded c: compute into a dense one
    thread_local std::vector<float> c_buf;
    c_buf.resize(static_cast<size_t>(m * n));
    for (int64_t i = 0; accumulate && i < m; ++i) std::memcpy(c_buf.data() + i * n, c + i * ldc, n * sizeof(float));
    if (!DnnlBf16Gemm(a, b, c_buf.data(), n, accumulate)) return false;
    for (int64_t i = 0; i < m; ++i) std::memcpy(c + i * ldc, c_buf.data() + i * n, n * sizeof(float));
    return true;
  }
  const std::shared_ptr<const Primitive> p = Lookup(a, b, n, accumulate);
  if (!p) return false;
  thread_local std::unique_ptr<dnnl::stream> stream;
  thread_local std::vector<char> scratch;
  if (!stream) stream = std::make_unique<dnnl::stream>(DnnlEngine());
  if (scratch.size() < p->scratch.get_size()) scratch.resize(p->scratch.get_size());
  const dnnl::memory ma(p->a, DnnlEngine(), const_cast<void*>(a.data));
  const dnnl::memory mb(p->b, DnnlEngine(), const_cast<void*>(b.data));
  const dnnl::memory mc(p->c, DnnlEngine(), c);
  const dnnl::memory ms(p->scratch, DnnlEngine(), scratch.data());
  try {
    p->matmul.execute(*stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, ms}});
    stream->wait();
  } catch (const dnnl::error& e) {  // a created primitive should not fail: report it as a tessel bug
    TESSEL_FAIL(ErrorCode::kInternal, "gemm: oneDNN bf16 matmul [", m, ", ", a.cols, "] @ [", a.cols, ", ", n,
                "] (", p->impl, ") failed: ", e.what());
  }
  return true;
}

void DnnlBf16ClearCacheForTesting() { TheCache().Clear(); }

void DnnlSgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
               const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  const OneOmpThread one_thread;
  const dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb,
                                      accumulate ? 1.0f : 0.0f, c, ldc);
  TESSEL_INTERNAL_ASSERT(st == dnnl_success, "gemm: oneDNN sgemm [", m, ", ", k, "] @ [", k, ", ", n,
                         "] failed with status ", static_cast<int>(st));
}

std::string DnnlBf16Impl() {
  std::map<std::string, int> shapes;
  TheCache().ForEach([&](const Key&, const std::shared_ptr<const Primitive>& p) { ++shapes[p ? p->impl : "none"]; });
  std::string out;
  for (const auto& [impl, n] : shapes) out += (out.empty() ? "" : ", ") + impl + " ×" + std::to_string(n);
  return out;
}

}  // namespace tessel
