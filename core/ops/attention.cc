// core/ops/attention.cc — scaled_dot_product_attention: fused, blocked CPU forward and backward
// kernels and the backward formula: float32 (and bf16 / fp16, computed in float32 with P and dS rounded to the
// input's dtype before the products that read them, as torch's CPU kernel: AttentionHeadPtrs::score_rounding)
// runs the per-ISA register-tiled head kernels of core/ops/attention_kernels.h; float64 runs FlashAttention-2's
// schedule on BLAS block GEMMs (core/ops/gemm.h) below.
//
// Ops registered:
//   scaled_dot_product_attention(q [..., T, D], k [..., S, D], v [..., S, Dv]) {is_causal, scale}
//       → out [..., T, Dv] (q's dtype), lse [..., T] (float32; float64 for float64 q; non-differentiable)
//   scaled_dot_product_attention_backward(grad_out, q, k, v, out, lse) {is_causal, scale}
//       → grad_q, grad_k, grad_v
// out = softmax(q·kᵀ·scale + mask)·v with lse[i] = log Σ_j exp(q_i·k_j·scale) over unmasked j, saved so
// backward rebuilds P = exp(q·kᵀ·scale - lse) without recomputing the softmax statistics.
//
// Causal masking follows torch.nn.functional.scaled_dot_product_attention(is_causal=True) exactly:
// the mask is torch.ones(T, S).tril(diagonal=0), i.e. key j is masked for query i when j > i
// (top-left alignment, whatever S - T is). Every query row keeps key 0, so no row is fully masked;
// only S == 0 leaves a row with no keys, and then out is 0 and lse is -inf.
//
// Layout (float32): q, k, v, grad_out and out are read in place when their last dim is contiguous (the
// [B, H, T, D] view of a block's [B, T, H, D] projections needs no copy), and grad_q, grad_k, grad_v
// are written in their inputs' memory order, so the block's transpose back to [B, T, C] is free; out is
// contiguous (see ForwardFloat).
//
// Invariant: nothing larger than one score block (kBlockQ × kBlockK here, a query panel × 128 keys in
// attention_kernels.inc) is ever materialized, whatever T and S are. Forward: per block of query rows, key blocks stream through an online softmax (running
// max and sum per row; the output rows are rescaled when the max grows) and are finalized once.
// Backward: per (query block, key block) pair, P and dP are rebuilt from lse and accumulated into dQ,
// dK, dV. Under causal masking key blocks past a query block's last row are never computed. All
// arithmetic runs in fp32 (fp64 for float64); the leading dims of q, k, v are equal (no broadcasting)
// and flatten to B*H independent heads, processed in parallel, one head per task; a head's block GEMMs
// and reductions run single-threaded in a fixed order, so results do not depend on the thread count.
//
// Example:
//   Tensor y_BHTD = ScaledDotProductAttention(q_BHTD, k_BHSD, v_BHSD, /*is_causal=*/true);
#include "core/ops/exact_math.h"
#include "core/ops/attention.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <vector>

#include "core/autograd/call.h"
#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/dispatcher.h"
#include "core/ops/attention_kernels.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "core/ops/matmul.h"
#include "core/ops/reduction.h"
#include "core/ops/softmax.h"
#include "core/ops/view.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

constexpr int64_t kBlockQ = 64;             // query rows per score block
constexpr int64_t kBlockK = 128;            // keys per score block (scratch: kBlockQ x kBlockK per thread)
constexpr int64_t kMinTaskFlops = 1 << 16;  // heads per parallel task: at least this much work

template <typename C>
using RowMap = Eigen::Map<Eigen::Array<C, 1, Eigen::Dynamic>>;

DType ComputeDType(DType d) { return d == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }

// A new tensor of `like`'s sizes laid out in like's memory order when like is a dense permutation of
// its dims (a [B, H, T, D] view of [B, T, H, D] memory), so that the caller's transpose back to
// [B, T, H, D] is contiguous and needs no copy; else contiguous.
Tensor EmptyInLayoutOf(const Tensor& like, DType dtype = DType::kFloat32) {
  const int64_t n = like.dim();
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return like.stride(a) > like.stride(b); });
  Shape strides(n);
  int64_t running = 1;
  for (int64_t i = n - 1; i >= 0; --i) {
    strides[order[i]] = running;
    running *= like.size(order[i]);
  }
  if (like.numel() == 0 || like.is_contiguous() || strides != like.strides()) {
    return Empty(like.sizes(), dtype, like.device());
  }
  return MakeView(Empty({like.numel()}, dtype, like.device()), like.sizes(), strides, 0);
}

// `t` converted to `dtype` in t's memory order (itself when it already has the dtype).
Tensor CastOutput(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor c = EmptyInLayoutOf(t, dtype);
  CopyInto(c, t);
  return c;
}

Shape DropLast(const Shape& s, int64_t n) { return Shape(s.begin(), s.end() - n); }
Shape WithLast(Shape s, int64_t last) {
  s.back() = last;
  return s;
}

struct Dims {
  int64_t heads = 0;  // product of the leading dims (B*H)
  int64_t t = 0, s = 0, d = 0, dv = 0;
};

// Validates q, k, v (in[first..first+2]) and returns the problem sizes.
Dims CheckQkv(const char* op, std::span<const Tensor> in, int first) {
  const Tensor& q = in[first];
  const Tensor& k = in[first + 1];
  const Tensor& v = in[first + 2];
  TESSEL_CHECK(q.defined() && k.defined() && v.defined(), op, ": q, k and v are required, got ", DescribeInputs(in));
  TESSEL_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), op,
               ": expected q [..., T, D], k [..., S, D], v [..., S, Dv] with equal ranks >= 2, got q ",
               ShapeStr(q.sizes()), ", k ", ShapeStr(k.sizes()), ", v ", ShapeStr(v.sizes()));
  TESSEL_CHECK(IsFloating(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(), op,
               ": q, k, v must share one floating dtype, got ", DescribeInputs(in));
  const Shape lead = DropLast(q.sizes(), 2);
  TESSEL_CHECK(DropLast(k.sizes(), 2) == lead && DropLast(v.sizes(), 2) == lead, op,
               ": leading (batch/head) dims differ: q ", ShapeStr(q.sizes()), ", k ", ShapeStr(k.sizes()), ", v ",
               ShapeStr(v.sizes()));
  TESSEL_CHECK(k.size(-1) == q.size(-1), op, ": q and k need the same last dim D, got q ", ShapeStr(q.sizes()), ", k ",
               ShapeStr(k.sizes()));
  TESSEL_CHECK(v.size(-2) == k.size(-2), op, ": k and v need the same sequence length S, got k ", ShapeStr(k.sizes()),
               ", v ", ShapeStr(v.sizes()));
  return {NumElements(lead), q.size(-2), k.size(-2), q.size(-1), v.size(-1)};
}

// Heads per parallel task, so tiny heads do not pay a thread start each.
int64_t HeadGrain(const Dims& dm) {
  const int64_t flops = std::max<int64_t>(1, dm.t * dm.s * (dm.d + dm.dv));
  return std::max<int64_t>(1, kMinTaskFlops / flops);
}

// Number of keys a block of query rows [i0, i0 + rows) looks at.
int64_t KeysForBlock(const Dims& dm, bool causal, int64_t i0, int64_t rows) {
  return causal ? std::min(dm.s, i0 + rows) : dm.s;
}

// ---- blocks -----------------------------------------------------------------------------------------

// A row-major block of `rows` rows of a head's [*, cols] matrix starting at row r0 (a MatRef view).
template <typename C>
MatRef RowsOf(const C* base, int64_t r0, int64_t rows, int64_t cols) {
  return MatRef{base + r0 * cols, rows, cols, cols, 1};
}
// The transpose of RowsOf (a [cols, rows] view of the same memory).
template <typename C>
MatRef RowsOfT(const C* base, int64_t r0, int64_t rows, int64_t cols) {
  return MatRef{base + r0 * cols, cols, rows, 1, cols};
}
// Score-block scratch, aligned so every row (kBlockK elements) starts on a vector boundary: Eigen's
// packet exp and sum then never peel a scalar prologue, whose position would depend on where the heap
// put the buffer (and so the bits on which thread ran the head).
template <typename C>
using Scratch = std::vector<C, Eigen::aligned_allocator<C>>;

template <typename C>
constexpr DType DTypeOf() {
  return sizeof(C) == 4 ? DType::kFloat32 : DType::kFloat64;
}

// Keys of key block [j0, j0 + cols) that query row i sees (0 when the whole block is masked).
int64_t VisibleKeys(bool causal, int64_t i, int64_t j0, int64_t cols) {
  return causal ? std::clamp<int64_t>(i + 1 - j0, 0, cols) : cols;
}

// ---- forward --------------------------------------------------------------------------------------

// Online-softmax state of one query block: running max m, running sum l per row.
template <typename C>
struct RowStats {
  std::vector<C> m, l;
};

// Folds one score block (rows × cols, row stride kBlockK, already q·kᵀ) into the running statistics:
// scores become P = exp(s·scale - m_new) in place (0 where masked) and the rows of O (leading dim dv)
// are rescaled by exp(m_old - m_new).
template <typename C>
void OnlineSoftmaxBlock(C* sc, int64_t rows, int64_t cols, int64_t i0, int64_t j0, bool causal, C scale,
                        RowStats<C>& st, C* o, int64_t dv) {
  for (int64_t r = 0; r < rows; ++r) {
    C* p = sc + r * kBlockK;
    const int64_t limit = VisibleKeys(causal, i0 + r, j0, cols);
    std::fill(p + limit, p + cols, C(0));
    if (limit == 0) continue;
    RowMap<C> row(p, limit);  // vectorized exp (Eigen's packet math)
    row *= scale;
    const C m_new = std::max(st.m[r], row.maxCoeff());
    if (m_new == -std::numeric_limits<C>::infinity()) {  // every visible score so far is -inf: P = 0 (not
      std::fill(p, p + limit, C(0));                      // exp(-inf - -inf) = NaN); l stays 0, m -inf
      continue;
    }
    ExpInto(p, m_new, p, limit);  // exact 0 at -inf scores (Eigen's packet exp reads 5.6e-309 there)
    const C alpha = std::exp(st.m[r] - m_new);  // 0 on the first visible block (m = -inf)
    st.l[r] = st.l[r] * alpha + row.sum();
    st.m[r] = m_new;
    if (alpha != C(1)) RowMap<C>(o + r * dv, dv) *= alpha;
  }
}

// One head: o [T, Dv] and lse [T] from q [T, D], k [S, D], v [S, Dv]. `sc` is kBlockQ × kBlockK scratch.
template <typename C>
void ForwardHead(const C* q, const C* k, const C* v, C* o, C* lse, const Dims& dm, bool causal, C scale,
                 Scratch<C>& sc) {
  RowStats<C> st;
  for (int64_t i0 = 0; i0 < dm.t; i0 += kBlockQ) {
    const int64_t rows = std::min(kBlockQ, dm.t - i0);
    const int64_t keys = KeysForBlock(dm, causal, i0, rows);
    C* ob = o + i0 * dm.dv;
    std::fill(ob, ob + rows * dm.dv, C(0));
    st.m.assign(rows, -std::numeric_limits<C>::infinity());
    st.l.assign(rows, C(0));
    for (int64_t j0 = 0; j0 < keys; j0 += kBlockK) {
      const int64_t cols = std::min(kBlockK, keys - j0);
      Gemm(DTypeOf<C>(), RowsOf(q, i0, rows, dm.d), RowsOfT(k, j0, cols, dm.d), sc.data(), kBlockK, false);
      OnlineSoftmaxBlock<C>(sc.data(), rows, cols, i0, j0, causal, scale, st, ob, dm.dv);
      Gemm(DTypeOf<C>(), MatRef{sc.data(), rows, cols, kBlockK, 1}, RowsOf(v, j0, cols, dm.dv), ob, dm.dv, true);
    }
    for (int64_t r = 0; r < rows; ++r) {  // S == 0 leaves l = 0: out 0, lse -inf
      if (st.l[r] > C(0)) RowMap<C>(ob + r * dm.dv, dm.dv) *= C(1) / st.l[r];
      lse[i0 + r] = st.m[r] + std::log(st.l[r]);
    }
  }
}

// ---- float32: the per-ISA head kernels (core/ops/attention_kernels.h) ------------------------------

AttentionHeadDims HeadDims(const Dims& dm) { return {dm.t, dm.s, dm.d, dm.dv}; }

// `t` itself when the head kernels can read it in place (float32, last dim contiguous: a [B, H, T, D]
// view of [B, T, H, D] memory qualifies), else a contiguous float32 copy.
Tensor ReadableFloat(const Tensor& t) {
  // Rows must not overlap either: an input expanded along its rows (stride(-2) == 0) was read at a row
  // stride of the width, past the end of its one stored row (garbage, or a segfault).
  const bool last_contiguous = t.size(-1) <= 1 || t.stride(-1) == 1;
  const bool rows_apart = t.dim() < 2 || t.size(-2) <= 1 || t.stride(-2) >= t.size(-1);
  if (t.dtype() == DType::kFloat32 && last_contiguous && rows_apart) return t;
  return DenseAs(t, DType::kFloat32);
}

// Rows of every head of `t` [..., rows, width]: element offsets of the heads (the leading dims, row-major
// order) and the row stride.
struct HeadRows {
  std::vector<int64_t> offset;
  int64_t ld = 0;
};
HeadRows RowsOfHeads(const Tensor& t) {
  const int64_t lead = t.dim() - 2;
  HeadRows r;
  r.ld = t.size(-2) <= 1 ? t.size(-1) : t.stride(-2);
  std::vector<int64_t> index(lead, 0);
  const int64_t heads = NumElements(DropLast(t.sizes(), 2));
  r.offset.reserve(heads);
  for (int64_t h = 0; h < heads; ++h) {
    int64_t off = 0;
    for (int64_t i = 0; i < lead; ++i) off += index[i] * t.stride(i);
    r.offset.push_back(off);
    for (int64_t i = lead - 1; i >= 0 && ++index[i] == t.size(i); --i) index[i] = 0;
  }
  return r;
}

// Head-kernel scratch of at least `floats` floats, 64-byte aligned and uninitialized (the kernels write
// before they read). Buffers up to kKeptScratchBytes (heads of T = S = 1024, D = 64 fit) stay with the
// thread for its next call: allocating them per call cost the pool worker ~30 page faults per fwd+bwd
// (its arena returns freed tops to the kernel), 1-2% of the figure's step. Larger ones live for the
// call. Throws std::bad_alloc as Empty does.
constexpr int64_t kKeptScratchBytes = int64_t{4} << 20;
class ScratchBuffer {
 public:
  explicit ScratchBuffer(int64_t floats) {
    static thread_local Owned kept;
    const int64_t bytes = std::max<int64_t>(floats, 1) * static_cast<int64_t>(sizeof(float));
    if (bytes > kKeptScratchBytes) {
      own_.Reset(bytes);
      data_ = own_.p;
      return;
    }
    if (kept.bytes < bytes) kept.Reset(bytes);
    data_ = kept.p;
  }
  float* data() const { return data_; }

 private:
  struct Owned {
    float* p = nullptr;
    int64_t bytes = 0;
    void Reset(int64_t n) {
      Free();
      p = static_cast<float*>(::operator new[](n, kAlign));
      bytes = n;
    }
    void Free() {
      if (p != nullptr) ::operator delete[](p, kAlign);
      p = nullptr, bytes = 0;
    }
    ~Owned() { Free(); }
  };
  static constexpr std::align_val_t kAlign{64};
  Owned own_;
  float* data_ = nullptr;
};

// Runs run(ptrs(h), scratch) for every head h on the worker pool, with one scratch buffer per thread;
// each head's ptrs name the next head the same thread runs (AttentionHeadPtrs::next), whose operands
// the kernels prefetch while computing this one. Heads are claimed one group of HeadGrain(dm) at a time
// (ParallelForClaimAhead), not in ParallelFor's chunks of up to a quarter of a thread's share, because
// a call ends when its slowest thread does: on this 2-vCPU VM one thread is often slowed for a while by
// other work on the host, and with 16-head chunks (128 heads [128, 32]) the other then idled for up to
// a chunk. attention_vs_gemm_flops, 15 alternating runs of each build on Zen 4: median 0.573 -> 0.624,
// worst 0.539 -> 0.592.
void ForEachHead(const Dims& dm, const std::function<AttentionHeadPtrs(int64_t)>& ptrs,
                 const std::function<void(const AttentionHeadPtrs&, float*)>& run) {
  const int64_t scratch_floats = ActiveAttentionKernels().scratch_floats(HeadDims(dm));
  ParallelForClaimAhead(0, dm.heads, HeadGrain(dm), [&](int64_t h0, int64_t h1, int64_t h_next) {
    const ScratchBuffer scratch(scratch_floats);
    AttentionHeadPtrs head = ptrs(h0), next;
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t n = h + 1 < h1 ? h + 1 : h_next;
      head.next = nullptr;
      if (n < dm.heads) next = ptrs(n), head.next = &next;
      run(head, scratch.data());
      head = next;
    }
  });
}

const float* In(const Tensor& t) { return static_cast<const float*>(t.raw_data()); }
float* Mut(const Tensor& t) { return static_cast<float*>(t.raw_data()); }

// 16-bit inputs: P and dS rounded as torch's kernel rounds its GEMMs' operands (AttentionHeadPtrs::score_rounding).
ScoreRounding ScoreRoundingOf(DType dtype) {
  if (dtype == DType::kBFloat16) return ScoreRounding::kBFloat16;
  return dtype == DType::kFloat16 ? ScoreRounding::kFloat16 : ScoreRounding::kNone;
}

// in: q, k, v (any floating dtype); returns out (q's dtype), lse (float32).
TensorList ForwardFloat(std::span<const Tensor> in, const Dims& dm, bool causal, float scale) {
  const Tensor q = ReadableFloat(in[0]), k = ReadableFloat(in[1]), v = ReadableFloat(in[2]);
  // out stays contiguous [..., T, Dv]: the block's output projection then reads a separate [B, T, C]
  // copy, which is what selective activation checkpointing drops (core/nn/checkpoint_wrapper.h); an
  // out in q's memory order would be that copy itself and leave selective nothing to drop.
  Tensor out = Empty(WithLast(q.sizes(), dm.dv), DType::kFloat32, q.device());
  Tensor lse = Empty(DropLast(q.sizes(), 1), DType::kFloat32, q.device());
  const HeadRows hq = RowsOfHeads(q), hk = RowsOfHeads(k), hv = RowsOfHeads(v), ho = RowsOfHeads(out);
  const AttentionKernels& kern = ActiveAttentionKernels();
  auto ptrs = [&](int64_t h) {
    AttentionHeadPtrs p;
    p.q = In(q) + hq.offset[h], p.k = In(k) + hk.offset[h], p.v = In(v) + hv.offset[h];
    p.o = Mut(out) + ho.offset[h], p.lse = Mut(lse) + h * dm.t;
    p.q_ld = hq.ld, p.k_ld = hk.ld, p.v_ld = hv.ld, p.o_ld = ho.ld;
    p.score_rounding = ScoreRoundingOf(in[0].dtype());
    return p;
  };
  ForEachHead(dm, ptrs, [&](const AttentionHeadPtrs& p, float* scratch) {
    kern.forward(p, HeadDims(dm), causal, scale, scratch);
  });
  return {CastOutput(out, in[0].dtype()), lse};
}

// in: grad_out, q, k, v, out, lse; returns dq, dk, dv in q's dtype.
TensorList BackwardFloat(std::span<const Tensor> in, const Dims& dm, bool causal, float scale) {
  TensorList c;  // dout, q, k, v, out, lse readable in place
  for (const Tensor& t : in) c.push_back(ReadableFloat(t));
  const Tensor lse = DenseAs(c[5], DType::kFloat32);
  Tensor dq = EmptyInLayoutOf(c[1]), dk = EmptyInLayoutOf(c[2]), dv = EmptyInLayoutOf(c[3]);
  const HeadRows hg = RowsOfHeads(c[0]), hq = RowsOfHeads(c[1]), hk = RowsOfHeads(c[2]), hv = RowsOfHeads(c[3]);
  const HeadRows ho = RowsOfHeads(c[4]), hdq = RowsOfHeads(dq), hdk = RowsOfHeads(dk), hdv = RowsOfHeads(dv);
  const AttentionKernels& kern = ActiveAttentionKernels();
  auto ptrs = [&](int64_t h) {
    AttentionHeadPtrs p;
    p.q = In(c[1]) + hq.offset[h], p.k = In(c[2]) + hk.offset[h], p.v = In(c[3]) + hv.offset[h];
    p.saved_o = In(c[4]) + ho.offset[h], p.saved_lse = In(lse) + h * dm.t, p.dout = In(c[0]) + hg.offset[h];
    p.dq = Mut(dq) + hdq.offset[h], p.dk = Mut(dk) + hdk.offset[h], p.dv = Mut(dv) + hdv.offset[h];
    p.q_ld = hq.ld, p.k_ld = hk.ld, p.v_ld = hv.ld, p.o_ld = ho.ld, p.dout_ld = hg.ld;
    p.dq_ld = hdq.ld, p.dk_ld = hdk.ld, p.dv_ld = hdv.ld;
    p.score_rounding = ScoreRoundingOf(in[1].dtype());
    return p;
  };
  ForEachHead(dm, ptrs, [&](const AttentionHeadPtrs& p, float* scratch) {
    kern.backward(p, HeadDims(dm), causal, scale, scratch);
  });
  const DType dt = in[1].dtype();
  return {CastOutput(dq, dt), CastOutput(dk, dt), CastOutput(dv, dt)};
}

// ---- kernels ----------------------------------------------------------------------------------------

TensorList ForwardKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const char* op = "scaled_dot_product_attention";
  const Dims dm = CheckQkv(op, in, 0);
  const bool causal = attrs.GetBool("is_causal");
  const DType ct = ComputeDType(in[0].dtype());
  if (ct == DType::kFloat32) return ForwardFloat(in, dm, causal, static_cast<float>(attrs.GetDouble("scale")));
  const Tensor q = DenseAs(in[0], ct), k = DenseAs(in[1], ct), v = DenseAs(in[2], ct);
  Tensor out = Empty(WithLast(in[0].sizes(), dm.dv), ct, q.device());
  Tensor lse = Empty(DropLast(in[0].sizes(), 1), ct, q.device());
  auto run = [&](auto zero) {
    using C = decltype(zero);
    const C scale = static_cast<C>(attrs.GetDouble("scale"));
    const C* pq = static_cast<const C*>(q.raw_data());
    const C* pk = static_cast<const C*>(k.raw_data());
    const C* pv = static_cast<const C*>(v.raw_data());
    C* po = static_cast<C*>(out.raw_data());
    C* pl = static_cast<C*>(lse.raw_data());
    ParallelFor(0, dm.heads, HeadGrain(dm), [&](int64_t h0, int64_t h1) {
      const NumThreadsGuard one_thread(1);  // block GEMMs stay single-threaded even when this runs inline
      Scratch<C> sc(kBlockQ * kBlockK);
      for (int64_t h = h0; h < h1; ++h) {
        ForwardHead<C>(pq + h * dm.t * dm.d, pk + h * dm.s * dm.d, pv + h * dm.s * dm.dv, po + h * dm.t * dm.dv,
                       pl + h * dm.t, dm, causal, scale, sc);
      }
    });
  };
  run(double{});
  return {CastOutput(out, in[0].dtype()), lse};
}

// ---- fused backward -------------------------------------------------------------------------------

// Per-head pointers of the backward pass (compute type, contiguous).
template <typename C>
struct HeadGrads {
  const C *q, *k, *v, *o, *dout, *lse;
  C *dq, *dk, *dv;
};

// Per-thread scratch of the backward pass: P and dP blocks (kBlockQ × kBlockK) and delta [T].
template <typename C>
struct BackwardScratch {
  Scratch<C> p = Scratch<C>(kBlockQ * kBlockK);
  Scratch<C> dp = Scratch<C>(kBlockQ * kBlockK);
  std::vector<C> delta;
};

// P = exp(s·scale - lse) and dS = P ∘ (dP - delta)·scale in place for one (query, key) block pair.
template <typename C>
void SoftmaxGradBlock(C* p, C* dp, int64_t rows, int64_t cols, int64_t i0, int64_t j0, bool causal, C scale,
                      const C* lse, const C* delta) {
  for (int64_t r = 0; r < rows; ++r) {
    C* pr = p + r * kBlockK;
    C* dsr = dp + r * kBlockK;
    // A row whose scores are all -inf (lse -inf) has P = 0 and so dS = 0 (exp(s - lse) would be NaN).
    const int64_t limit = lse[i0 + r] == -std::numeric_limits<C>::infinity() ? 0 : VisibleKeys(causal, i0 + r, j0, cols);
    RowMap<C> prow(pr, limit), dsrow(dsr, limit);
    prow *= scale;
    ExpInto(pr, lse[i0 + r], pr, limit);  // exact 0 at -inf scores
    dsrow = prow * (dsrow - delta[i0 + r]) * scale;
    std::fill(pr + limit, pr + cols, C(0));
    std::fill(dsr + limit, dsr + cols, C(0));
  }
}

// One head: dq, dk, dv from dout, with P rebuilt block by block from lse (FlashAttention-2's backward).
template <typename C>
void BackwardHead(const HeadGrads<C>& g, const Dims& dm, bool causal, C scale, BackwardScratch<C>& s) {
  constexpr DType dt = DTypeOf<C>();
  std::fill(g.dq, g.dq + dm.t * dm.d, C(0));
  std::fill(g.dk, g.dk + dm.s * dm.d, C(0));
  std::fill(g.dv, g.dv + dm.s * dm.dv, C(0));
  s.delta.resize(dm.t);  // delta_i = Σ_c dO[i, c] * O[i, c] = Σ_j P_ij dP_ij
  for (int64_t i = 0; i < dm.t; ++i) {
    C acc = 0;
    for (int64_t c = 0; c < dm.dv; ++c) acc += g.dout[i * dm.dv + c] * g.o[i * dm.dv + c];
    s.delta[i] = acc;
  }
  for (int64_t i0 = 0; i0 < dm.t; i0 += kBlockQ) {
    const int64_t rows = std::min(kBlockQ, dm.t - i0);
    const int64_t keys = KeysForBlock(dm, causal, i0, rows);
    for (int64_t j0 = 0; j0 < keys; j0 += kBlockK) {
      const int64_t cols = std::min(kBlockK, keys - j0);
      const MatRef pbt{s.p.data(), cols, rows, 1, kBlockK};
      const MatRef dsb{s.dp.data(), rows, cols, kBlockK, 1}, dsbt{s.dp.data(), cols, rows, 1, kBlockK};
      Gemm(dt, RowsOf(g.q, i0, rows, dm.d), RowsOfT(g.k, j0, cols, dm.d), s.p.data(), kBlockK, false);
      Gemm(dt, RowsOf(g.dout, i0, rows, dm.dv), RowsOfT(g.v, j0, cols, dm.dv), s.dp.data(), kBlockK, false);
      SoftmaxGradBlock<C>(s.p.data(), s.dp.data(), rows, cols, i0, j0, causal, scale, g.lse, s.delta.data());
      Gemm(dt, pbt, RowsOf(g.dout, i0, rows, dm.dv), g.dv + j0 * dm.dv, dm.dv, true);  // dV += Pᵀ dO
      Gemm(dt, dsb, RowsOf(g.k, j0, cols, dm.d), g.dq + i0 * dm.d, dm.d, true);       // dQ += dS K
      Gemm(dt, dsbt, RowsOf(g.q, i0, rows, dm.d), g.dk + j0 * dm.d, dm.d, true);      // dK += dSᵀ Q
    }
  }
}

// Checks the extra backward inputs (grad_out, out, lse) against q/k/v's sizes.
void CheckBackwardArgs(const char* op, std::span<const Tensor> in, const Dims& dm) {
  const Shape out_shape = WithLast(in[1].sizes(), dm.dv);
  const Shape lse_shape = DropLast(in[1].sizes(), 1);
  TESSEL_CHECK(in[0].defined() && in[0].sizes() == out_shape && in[0].dtype() == in[1].dtype(), op,
               ": grad_out must have shape ", ShapeStr(out_shape), " and q's dtype, got ", DescribeInputs(in));
  TESSEL_CHECK(in[4].defined() && in[4].sizes() == out_shape && in[4].dtype() == in[1].dtype(), op,
               ": out must have shape ", ShapeStr(out_shape), " and q's dtype, got ", DescribeInputs(in));
  TESSEL_CHECK(in[5].defined() && in[5].sizes() == lse_shape && in[5].dtype() == ComputeDType(in[1].dtype()), op,
               ": lse must have shape ", ShapeStr(lse_shape), " and dtype ", ComputeDType(in[1].dtype()), ", got ",
               DescribeInputs(in));
}

// in: grad_out, q, k, v, out, lse.
TensorList BackwardKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const char* op = "scaled_dot_product_attention_backward";
  const Dims dm = CheckQkv(op, in, 1);
  CheckBackwardArgs(op, in, dm);
  const bool causal = attrs.GetBool("is_causal");
  const DType dt = in[1].dtype();
  const DType ct = ComputeDType(dt);
  if (ct == DType::kFloat32) return BackwardFloat(in, dm, causal, static_cast<float>(attrs.GetDouble("scale")));
  TensorList c;  // dout, q, k, v, out, lse as contiguous compute-type tensors
  for (const Tensor& t : in) c.push_back(DenseAs(t, ct));
  Tensor dq = Empty(in[1].sizes(), ct, in[1].device());
  Tensor dk = Empty(in[2].sizes(), ct, in[1].device());
  Tensor dv = Empty(in[3].sizes(), ct, in[1].device());
  auto run = [&](auto zero) {
    using C = decltype(zero);
    const C scale = static_cast<C>(attrs.GetDouble("scale"));
    auto ptr = [&](int i) { return static_cast<const C*>(c[i].raw_data()); };
    ParallelFor(0, dm.heads, HeadGrain(dm), [&](int64_t h0, int64_t h1) {
      const NumThreadsGuard one_thread(1);
      BackwardScratch<C> scratch;
      for (int64_t h = h0; h < h1; ++h) {
        const int64_t qo = h * dm.t * dm.d, ko = h * dm.s * dm.d, vo = h * dm.s * dm.dv, oo = h * dm.t * dm.dv;
        HeadGrads<C> g{ptr(1) + qo,
                       ptr(2) + ko,
                       ptr(3) + vo,
                       ptr(4) + oo,
                       ptr(0) + oo,
                       ptr(5) + h * dm.t,
                       static_cast<C*>(dq.raw_data()) + qo,
                       static_cast<C*>(dk.raw_data()) + ko,
                       static_cast<C*>(dv.raw_data()) + vo};
        BackwardHead<C>(g, dm, causal, scale, scratch);
      }
    });
  };
  run(double{});
  return {CastOutput(dq, dt), CastOutput(dk, dt), CastOutput(dv, dt)};
}

// ---- registration and backward formula ------------------------------------------------------------

const OpDef& kAttentionBackward =
    RegisterOp({.name = "scaled_dot_product_attention_backward", .cpu = BackwardKernel, .save_inputs = false});

// create_graph (higher-order gradients): the same gradients from differentiable ops, as torch's math
// backend computes them, so they can be differentiated again. P is recomputed from q and k (the saved lse
// carries no graph): with S = q·kᵀ·scale (causally masked to -inf) and P = softmax(S),
//   dv = Pᵀ·g,  dP = g·vᵀ,  dS = P ∘ (dP − rowsum(dP ∘ P)),  dq = scale·dS·k,  dk = scale·dSᵀ·q.
// A row that sees no key (S = 0 keys) has no terms; a causal row always sees key 0.
TensorList ComposedAttentionBackward(const BackwardContext& c) {
  const Tensor &g = c.grad_outputs[0], &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
  const double scale = c.attrs.GetDouble("scale");
  const Tensor p = Softmax(attention_internal::ScaledScores(q, k, scale, c.attrs.GetBool("is_causal")), -1);
  const Tensor dp = Matmul(g, Transpose(v, -2, -1));
  const Tensor ds = Mul(p, Sub(dp, Sum(Mul(dp, p), {-1}, /*keepdim=*/true)));
  TensorList out(3);
  if (c.needs_input_grad[0]) out[0] = MulScalar(Matmul(ds, k), scale);
  if (c.needs_input_grad[1]) out[1] = MulScalar(Matmul(Transpose(ds, -2, -1), q), scale);
  if (c.needs_input_grad[2]) out[2] = Matmul(Transpose(p, -2, -1), g);
  return out;
}

TensorList AttentionBackward(const BackwardContext& c) {
  const Tensor& g = c.grad_outputs[0];
  if (!g.defined()) return {Tensor(), Tensor(), Tensor()};
  if (CreatingGraph()) return ComposedAttentionBackward(c);
  return autograd::CallOp(kAttentionBackward, {g, c.inputs[0], c.inputs[1], c.inputs[2], c.outputs[0], c.outputs[1]},
                          c.attrs);
}

const OpDef& kAttention = RegisterOp({.name = "scaled_dot_product_attention",
                                      .cpu = ForwardKernel,
                                      .backward = AttentionBackward,
                                      .save_outputs = true,
                                      .non_differentiable_outputs = {1}});

}  // namespace

TensorList AttentionForwardRaw(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal, double scale) {
  return Dispatch(kAttention, TensorList{q, k, v}, Attrs().Set("is_causal", is_causal).Set("scale", scale));
}

TensorList AttentionBackwardRaw(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const Tensor& lse, bool is_causal, double scale) {
  return Dispatch(kAttentionBackward, TensorList{grad_out, q, k, v, out, lse},
                  Attrs().Set("is_causal", is_causal).Set("scale", scale));
}

Tensor ScaledDotProductAttention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                                 std::optional<double> scale) {
  const int64_t d = q.defined() && q.dim() >= 1 ? q.size(-1) : 0;
  const double s = scale ? *scale : (d > 0 ? 1.0 / std::sqrt(static_cast<double>(d)) : 1.0);
  return autograd::CallOp(kAttention, {q, k, v}, Attrs().Set("is_causal", is_causal).Set("scale", s))[0];
}

}  // namespace tessel
