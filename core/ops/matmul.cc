// core/ops/matmul.cc — ops "matmul" and "linear": CPU kernels on the BLAS GEMM (core/ops/gemm.h) and
// backward formulas that are themselves "matmul" calls.
//
// [Note: matmul attrs] One op, "matmul", covers torch.matmul and every product its backward needs, so
// no gradient ever materializes a transpose. Attrs (all optional; absent = torch.matmul):
//   a_new_dims, b_new_dims  ⊆ {-2, -1}: size-1 dims inserted into the operand first (default: a 1-D a
//                           becomes [1, K], a 1-D b becomes [K, 1] — torch's promotion)
//   transpose_a, transpose_b  swap the operand's last two dims after the insertion (a stride swap)
//   squeeze_dims  ⊆ {-2, -1}: size-1 dims removed from the [..., M, N] product (default: the dims that
//                 torch's promotion inserted)
//   sum_batch     sum the product over its broadcast batch dims: the output is [M, N] (before squeeze)
// The kernel folds batch dims into one GEMM where the strides allow: rows of a 3-D x against a 2-D
// weight (x @ w^T is one [B*T, in] GEMM), and the batch into the contraction for sum_batch (grad_w =
// g^T @ x is one [out, B*T] · [B*T, in] GEMM). Otherwise it loops over the batch, in parallel when
// the matrices are small, else leaving the threads to Gemm (which splits each product over them).
// linear's bias is added by the GEMM's epilogue (gemm.h, [Note: GEMM epilogue]) to each output panel
// right after the thread computed it, not by a fill pass before a beta = 1 GEMM; linear_gelu
// (linear_gelu.cc, through linear_forward.h) chains its activation onto the same epilogue.
//
// [Note: matmul backward] In the promoted frame A' [.., M, K], B' [.., K, N], G' [.., M, N]:
// dA' = G' B'^T and dB' = A'^T G'. Undoing an operand's transpose flag transposes its gradient, and
// (XY)^T = Y^T X^T, so each input gradient is one "matmul" call with permuted operands and flipped
// flags, summed back over broadcast batch dims (sum_batch, or SumToSize for partial broadcasts).
#include "core/ops/matmul.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/dispatcher.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "core/ops/gemm_operand.h"
#include "core/ops/linear_forward.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

constexpr int64_t kBatchGrain = int64_t{1} << 18;  // multiply-adds per parallel task, at least
// Elements of a panel the bias epilogue handles before running the caller's epilogue on them (16 KiB
// of float32: both passes over a chunk stay in L1).
constexpr int64_t kEpilogueChunk = int64_t{1} << 12;

struct MatmulSpec {
  std::vector<int64_t> a_new_dims;
  std::vector<int64_t> b_new_dims;
  bool transpose_a = false;
  bool transpose_b = false;
  std::vector<int64_t> squeeze_dims;
  bool sum_batch = false;
};

bool Contains(const std::vector<int64_t>& v, int64_t d) { return std::find(v.begin(), v.end(), d) != v.end(); }

std::vector<int64_t> CheckedDims(const Attrs& attrs, const char* name) {
  std::vector<int64_t> dims = attrs.GetInts(name);
  for (int64_t d : dims) TESSEL_CHECK(d == -2 || d == -1, "matmul: attr ", name, " may hold only -2 and -1");
  return dims;
}

MatmulSpec ParseSpec(const Attrs& attrs, const Tensor& a, const Tensor& b) {
  MatmulSpec s;
  s.transpose_a = attrs.GetBool("transpose_a", false);
  s.transpose_b = attrs.GetBool("transpose_b", false);
  s.sum_batch = attrs.GetBool("sum_batch", false);
  // torch's promotion applies to a 1-D operand whose new dims are not given; only the dims it
  // inserted are squeezed by default.
  const bool promote_a = !attrs.Has("a_new_dims") && a.dim() == 1;
  const bool promote_b = !attrs.Has("b_new_dims") && b.dim() == 1;
  if (attrs.Has("a_new_dims")) s.a_new_dims = CheckedDims(attrs, "a_new_dims");
  if (attrs.Has("b_new_dims")) s.b_new_dims = CheckedDims(attrs, "b_new_dims");
  if (promote_a) s.a_new_dims = {-2};
  if (promote_b) s.b_new_dims = {-1};
  if (attrs.Has("squeeze_dims")) {
    s.squeeze_dims = CheckedDims(attrs, "squeeze_dims");
  } else {
    if (promote_a) s.squeeze_dims.push_back(-2);
    if (promote_b) s.squeeze_dims.push_back(-1);
  }
  return s;
}

Attrs ToAttrs(const MatmulSpec& s) {
  return Attrs()
      .Set("a_new_dims", s.a_new_dims)
      .Set("b_new_dims", s.b_new_dims)
      .Set("transpose_a", s.transpose_a)
      .Set("transpose_b", s.transpose_b)
      .Set("squeeze_dims", s.squeeze_dims)
      .Set("sum_batch", s.sum_batch);
}

// "[2, 3] @ [4, 5]", with the non-default flags, for error messages.
std::string DescribeCall(const Tensor& a, const Tensor& b, const MatmulSpec& s) {
  std::string text =
      ShapeStr(a.sizes()) + (s.transpose_a ? "^T" : "") + " @ " + ShapeStr(b.sizes()) + (s.transpose_b ? "^T" : "");
  if (s.sum_batch) text += " (summed over batch dims)";
  return text;
}

// The operand as [batch..., rows, cols]: new size-1 dims inserted, then the last two swapped (a view).
Tensor Resolve(const Tensor& t, const std::vector<int64_t>& new_dims, bool transpose) {
  if (new_dims.empty() && !transpose) return t.dim() >= 2 ? t : Tensor();  // already the frame (no view to make)
  Shape sizes = t.sizes();
  Shape strides = t.strides();
  const bool rows = Contains(new_dims, -2);
  const bool cols = Contains(new_dims, -1);
  if (cols) {
    sizes.push_back(1);
    strides.push_back(1);
  }
  if (rows) {
    const size_t pos = sizes.size() >= (cols ? 2u : 1u) ? sizes.size() - (cols ? 2 : 1) : 0;
    sizes.insert(sizes.begin() + pos, 1);
    strides.insert(strides.begin() + pos, 1);
  }
  if (sizes.size() < 2) return Tensor();
  if (transpose) {
    std::swap(sizes[sizes.size() - 1], sizes[sizes.size() - 2]);
    std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  }
  return MakeView(t, sizes, strides, t.storage_offset());
}

Shape BatchShape(const Tensor& t) { return Shape(t.sizes().begin(), t.sizes().end() - 2); }

// Strides of t's batch dims right-aligned to `batch` (0 where t broadcasts).
Shape BatchStrides(const Tensor& t, const Shape& batch) {
  Shape out(batch.size(), 0);
  const int64_t nt = t.dim() - 2;
  const int64_t lead = static_cast<int64_t>(batch.size()) - nt;
  for (int64_t i = 0; i < nt; ++i) out[lead + i] = t.size(i) == 1 ? 0 : t.stride(i);
  return out;
}

// The single stride of dims that enumerate one arithmetic progression (each outer dim steps exactly
// over the inner ones); size-1 dims are ignored. nullopt when they do not.
std::optional<int64_t> Collapse(const Shape& sizes, const Shape& strides) {
  int64_t stride = 1;
  int64_t span = -1;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    if (sizes[i] == 1) continue;
    if (span < 0) {
      stride = strides[i];
    } else if (strides[i] != span) {
      return std::nullopt;
    }
    span = strides[i] * sizes[i];
  }
  return stride;
}

Shape Append(Shape v, int64_t x) {
  v.push_back(x);
  return v;
}

// Element offsets of each batch entry into A and B (row-major over `batch`).
void BatchOffsets(const Shape& batch, const Shape& sa, const Shape& sb, std::vector<int64_t>& oa,
                  std::vector<int64_t>& ob) {
  const int64_t nb = NumElements(batch);
  oa.resize(nb);
  ob.resize(nb);
  std::vector<int64_t> idx(batch.size(), 0);
  int64_t a = 0, b = 0;
  for (int64_t i = 0; i < nb; ++i) {
    oa[i] = a;
    ob[i] = b;
    for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
      ++idx[d];
      a += sa[d];
      b += sb[d];
      if (idx[d] < batch[d]) break;
      a -= sa[d] * batch[d];
      b -= sb[d] * batch[d];
      idx[d] = 0;
    }
  }
}

// out (contiguous [batch..., M, N], or [M, N] with sum_batch) (+)= A @ B over the broadcast batch.
// `epilogue` sees out as [batch * M, N] rows (gemm.h, [Note: GEMM epilogue]).
// REQUIRES: A, B share a dtype (float32/float64, or bfloat16 with a float32 out), out has the float one,
// and GemmCanRead(MatOf(A)), GemmCanRead(MatOf(B)); no epilogue with sum_batch.
void BatchedGemm(const Tensor& A, const Tensor& B, const Shape& batch, bool sum_batch, const Tensor& out,
                 bool accumulate, const GemmEpilogue& epilogue = nullptr) {
  TESSEL_INTERNAL_ASSERT(!(sum_batch && epilogue), "matmul: an epilogue on a batch-summed product");
  const DType dt = A.dtype();  // Gemm's dtype: the operands'
  const MatRef ma = MatOf(A), mb = MatOf(B);
  const int64_t M = ma.rows, K = ma.cols, N = mb.cols;
  const int64_t nb = NumElements(batch);
  char* pc = static_cast<char*>(out.raw_data());
  const int64_t esz = ElementSize(dt);                // operand elements
  const int64_t esz_c = ElementSize(out.dtype());     // product elements
  if (nb == 0 || M * N == 0) {
    if (!accumulate && out.numel() > 0) std::memset(pc, 0, out.numel() * esz_c);
    return;
  }
  if (nb == 1) return Gemm(dt, ma, mb, pc, N, accumulate, epilogue);
  const Shape sa = BatchStrides(A, batch), sb = BatchStrides(B, batch);
  if (!sum_batch && std::all_of(sb.begin(), sb.end(), [](int64_t s) { return s == 0; })) {
    // B is shared by the whole batch: fold A's batch dims into its rows when they line up.
    if (std::optional<int64_t> rs = Collapse(Append(batch, M), Append(sa, ma.row_stride))) {
      const MatRef fa{ma.data, nb * M, K, *rs, ma.col_stride};
      if (GemmCanRead(fa)) return Gemm(dt, fa, mb, pc, N, accumulate, epilogue);
    }
  }
  if (sum_batch) {
    // Σ_b A[b] B[b] = [M, (batch, K)] · [(batch, K), N] when both line up.
    std::optional<int64_t> ka = Collapse(Append(batch, K), Append(sa, ma.col_stride));
    std::optional<int64_t> kb = Collapse(Append(batch, K), Append(sb, mb.row_stride));
    if (ka && kb) {
      const MatRef fa{ma.data, M, nb * K, ma.row_stride, *ka};
      const MatRef fb{mb.data, nb * K, N, *kb, mb.col_stride};
      if (GemmCanRead(fa) && GemmCanRead(fb)) return Gemm(dt, fa, fb, pc, N, accumulate);
    }
  }
  std::vector<int64_t> oa, ob;
  BatchOffsets(batch, sa, sb, oa, ob);
  auto at = [&](const MatRef& m, int64_t off) {
    MatRef r = m;
    r.data = static_cast<const char*>(m.data) + off * esz;
    return r;
  };
  if (sum_batch) {
    for (int64_t i = 0; i < nb; ++i) Gemm(dt, at(ma, oa[i]), at(mb, ob[i]), pc, N, accumulate || i > 0);
    return;
  }
  const int64_t mnk = M * N * std::max<int64_t>(K, 1);
  auto run = [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) {
      GemmEpilogue shifted;  // product i holds rows [i * M, (i + 1) * M) of out
      if (epilogue) {
        shifted = [&, i](int64_t r0, int64_t r1, int64_t c0, int64_t c1) { epilogue(i * M + r0, i * M + r1, c0, c1); };
      }
      Gemm(dt, at(ma, oa[i]), at(mb, ob[i]), pc + i * M * N * esz_c, N, accumulate, shifted);
    }
  };
  if (GemmsInParallel(nb, mnk)) {
    ParallelFor(0, nb, std::max<int64_t>(1, kBatchGrain / mnk), run);
  } else {
    run(0, nb);  // few large GEMMs: Gemm threads each one
  }
}

// acc[r, c0:c1] += b[c0:c1] for r in [r0, r1); acc contiguous [.., n].
template <typename T>
void AddRows(const Tensor& acc, const Tensor& b, int64_t n, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  T* p = static_cast<T*>(acc.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t j = c0; j < c1; ++j) p[r * n + j] += pb[j];
  }
}

// The epilogue of a product `acc` (contiguous [rows, N], compute dtype): adds bias ([N], any floating
// dtype) to each row, then runs `after`, a few rows at a time so the rows are still in L1 for `after`.
GemmEpilogue BiasEpilogue(const Tensor& acc, const Tensor& bias, const LinearEpilogue& after) {
  if (!bias.defined() && !after) return nullptr;
  Tensor b = bias;
  if (b.defined() && (b.dtype() != acc.dtype() || !b.is_contiguous())) {
    b = Empty(bias.sizes(), acc.dtype(), bias.device());
    CopyInto(b, bias);
  }
  const int64_t n = acc.size(acc.dim() - 1);
  return [acc, b, after, n](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    const int64_t chunk = std::max<int64_t>(1, kEpilogueChunk / std::max<int64_t>(1, c1 - c0));
    for (int64_t s = r0; s < r1; s += chunk) {
      const int64_t e = std::min(r1, s + chunk);
      if (b.defined() && acc.dtype() == DType::kFloat32) AddRows<float>(acc, b, n, s, e, c0, c1);
      if (b.defined() && acc.dtype() == DType::kFloat64) AddRows<double>(acc, b, n, s, e, c0, c1);
      if (after) after(acc, s, e, c0, c1);
    }
  };
}

// [Note: integer matmul] torch multiplies integer matrices on the CPU (index arithmetic, counts), exactly
// and wrapping in the dtype. No BLAS or oneDNN GEMM takes int64 (oneDNN's integer GEMMs are int8 with
// int32 sums), so this is a plain loop: int64 operands, sums in uint64 (wrapping, no signed overflow),
// cast to the dtype at the end (mod 2^bits, the same as summing in the dtype). Batches run in parallel.
// Integer tensors never require grad, so there is no backward to match.
Tensor IntegerMatmul(const Tensor& a, const Tensor& b, const Shape& batch, bool sum_batch, const Tensor& bias,
                     const Shape& out_shape) {
  auto as_int64 = [](const Tensor& t) {  // contiguous int64 copy
    Tensor c = Empty(t.sizes(), DType::kInt64, t.device());
    CopyInto(c, t);
    return c;
  };
  const Tensor A = as_int64(a), B = as_int64(b);
  const int64_t M = A.size(A.dim() - 2), K = A.size(A.dim() - 1), N = B.size(B.dim() - 1);
  std::vector<int64_t> oa, ob;
  BatchOffsets(batch, BatchStrides(A, batch), BatchStrides(B, batch), oa, ob);
  const int64_t nb = NumElements(batch);
  Tensor acc = Zeros(out_shape, DType::kInt64, a.device());  // [batch..., M, N] or [M, N], squeezed
  const auto* pa = static_cast<const uint64_t*>(A.raw_data());
  const auto* pb = static_cast<const uint64_t*>(B.raw_data());
  auto* pc = static_cast<uint64_t*>(acc.raw_data());
  auto product = [&](int64_t i, uint64_t* c) {  // c[M, N] += A[i] · B[i], rows of B streamed (i-k-j order)
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t k = 0; k < K; ++k) {
        const uint64_t x = pa[oa[i] + m * K + k];
        const uint64_t* brow = pb + ob[i] + k * N;
        for (int64_t n = 0; n < N; ++n) c[m * N + n] += x * brow[n];
      }
    }
  };
  if (sum_batch) {
    for (int64_t i = 0; i < nb; ++i) product(i, pc);
  } else {
    ParallelFor(0, nb, std::max<int64_t>(1, kBatchGrain / std::max<int64_t>(1, M * N * K)), [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) product(i, pc + i * M * N);
    });
  }
  if (bias.defined() && N > 0) {
    const Tensor bb = as_int64(bias);
    const auto* pbias = static_cast<const uint64_t*>(bb.raw_data());
    for (int64_t r = 0; r < acc.numel() / N; ++r) {
      for (int64_t n = 0; n < N; ++n) pc[r * N + n] += pbias[n];
    }
  }
  if (a.dtype() == DType::kInt64) return acc;
  Tensor out = Empty(out_shape, a.dtype(), a.device());
  CopyInto(out, acc);
  return out;
}

// Output shape: [batch..., M, N] (or [M, N] with sum_batch) less the squeezed size-1 dims.
Shape OutputShape(const char* name, const Shape& batch, int64_t M, int64_t N, const MatmulSpec& s) {
  Shape out = s.sum_batch ? Shape{} : batch;
  if (!Contains(s.squeeze_dims, -2)) {
    out.push_back(M);
  } else {
    TESSEL_CHECK(M == 1, name, ": squeeze_dims names dim -2 of size ", M);
  }
  if (!Contains(s.squeeze_dims, -1)) {
    out.push_back(N);
  } else {
    TESSEL_CHECK(N == 1, name, ": squeeze_dims names dim -1 of size ", N);
  }
  return out;
}

// The whole forward of "matmul" and "linear": bias (optional, [N]) is added to every output row and
// `after` runs on the compute-type product, both as the GEMM's epilogue.
Tensor MatmulForward(const char* name, const Tensor& a, const Tensor& b, const MatmulSpec& s, const Tensor& bias,
                     const LinearEpilogue& after = nullptr) {
  TESSEL_CHECK(a.dtype() == b.dtype(), name, ": dtype mismatch ", a.dtype(), " vs ", b.dtype(), " (",
               DescribeCall(a, b, s), "); cast one side explicitly");
  if (a.dtype() == DType::kBool) {
    TESSEL_FAIL(ErrorCode::kUnimplemented, name, ": not implemented for bool tensors (", DescribeCall(a, b, s),
                "), as torch's; cast to an integer or floating dtype");
  }
  TESSEL_CHECK(IsFloating(a.dtype()) || IsIntegral(a.dtype()), name, ": expected real tensors, got ", a.dtype(), " (",
               DescribeCall(a, b, s), ")");
  Tensor A = Resolve(a, s.a_new_dims, s.transpose_a);
  Tensor B = Resolve(b, s.b_new_dims, s.transpose_b);
  TESSEL_CHECK(A.defined() && B.defined(), name, ": both arguments need at least 1 dim, got ", DescribeCall(a, b, s));
  const int64_t M = A.size(A.dim() - 2), K = A.size(A.dim() - 1);
  const int64_t K2 = B.size(B.dim() - 2), N = B.size(B.dim() - 1);
  TESSEL_CHECK(K == K2, "mat1 and mat2 shapes cannot be multiplied (", M, "x", K, " and ", K2, "x", N, ") (", name,
               ": inner dimensions do not match: ", DescribeCall(a, b, s), " contracts ", K, " with ", K2, ")");
  const Shape ba = BatchShape(A), bb = BatchShape(B);
  Shape batch;
  try {
    batch = BroadcastShapes(ba, bb, name);
  } catch (const Error&) {
    TESSEL_FAIL(ErrorCode::kInvalidArgument, name, ": batch dims ", ShapeStr(ba), " and ", ShapeStr(bb),
                " do not broadcast (", DescribeCall(a, b, s), ")");
  }
  const Shape out_shape = OutputShape(name, batch, M, N, s);
  if (IsIntegral(a.dtype())) {
    TESSEL_INTERNAL_ASSERT(!after, name, ": an epilogue on an integer product");
    return IntegerMatmul(A, B, batch, s.sum_batch, bias, out_shape);
  }
  const DType compute = a.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  A = GemmOperand(A, GemmOperandDType(a.dtype()));
  B = GemmOperand(B, GemmOperandDType(a.dtype()));
  Tensor out = Empty(out_shape, a.dtype(), a.device());
  Tensor acc = compute == a.dtype() ? out : Empty(out_shape, compute, a.device());
  BatchedGemm(A, B, batch, s.sum_batch, acc, /*accumulate=*/false, BiasEpilogue(acc, bias, after));
  if (!acc.is_same(out)) CopyInto(out, acc);  // 16-bit: round once
  return out;
}

TensorList MatmulKernel(std::span<const Tensor> in, const Attrs& attrs) {
  return {MatmulForward("matmul", in[0], in[1], ParseSpec(attrs, in[0], in[1]), Tensor())};
}

TensorList LinearKernel(std::span<const Tensor> in, const Attrs&) {
  const Tensor bias = in.size() > 2 ? in[2] : Tensor();
  CheckLinearArgs("linear", in[0], in[1], bias);
  return {LinearForward("linear", in[0], in[1], bias)};
}

// ---- backward formulas -------------------------------------------------------------------------

const OpDef& MatmulOp();

Tensor CallMatmul(const Tensor& a, const Tensor& b, const MatmulSpec& s) {
  return autograd::CallOp1(MatmulOp(), {a, b}, ToAttrs(s));
}

// The product's shape reduced/expanded to `target`'s: sums dims the target lacks or has as 1, and
// broadcasts over batch dims the product lacks (a forward with sum_batch summed over them).
Tensor FitToShape(const Tensor& r, const Tensor& target) {
  if (r.sizes() == target.sizes()) return r;
  Shape keep;
  const int64_t lead = r.dim() - target.dim();
  for (int64_t i = std::max<int64_t>(lead, 0); i < r.dim(); ++i) {
    const int64_t t = target.size(i - lead);
    keep.push_back(t == r.size(i) ? t : 1);
  }
  Tensor reduced = SumToSize(r, keep);
  return reduced.sizes() == target.sizes() ? reduced : Add(ZerosLike(target), reduced);
}

// Gradient of one operand: the product lhs @ rhs under `q`, squeezed to the operand's frame and
// summed over the batch dims it broadcast along.
Tensor OperandGrad(const Tensor& lhs, const Tensor& rhs, MatmulSpec q, const Tensor& target,
                   const std::vector<int64_t>& target_new_dims) {
  q.squeeze_dims = target_new_dims;
  const int64_t target_batch_rank = target.dim() + static_cast<int64_t>(target_new_dims.size()) - 2;
  if (target_batch_rank == 0) q.sum_batch = true;
  return FitToShape(CallMatmul(lhs, rhs, q), target);
}

TensorList MatmulBackward(const BackwardContext& c) {
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  const Tensor& g = c.grad_outputs[0];
  const MatmulSpec s = ParseSpec(c.attrs, a, b);
  Tensor ga, gb;
  if (c.needs_input_grad[0]) {
    MatmulSpec q;
    if (!s.transpose_a) {  // dA' = G' B'^T
      q.a_new_dims = s.squeeze_dims;
      q.b_new_dims = s.b_new_dims;
      q.transpose_b = !s.transpose_b;
      ga = OperandGrad(g, b, q, a, s.a_new_dims);
    } else {  // dA'^T = B' G'^T
      q.a_new_dims = s.b_new_dims;
      q.transpose_a = s.transpose_b;
      q.b_new_dims = s.squeeze_dims;
      q.transpose_b = true;
      ga = OperandGrad(b, g, q, a, s.a_new_dims);
    }
  }
  if (c.needs_input_grad[1]) {
    MatmulSpec q;
    if (!s.transpose_b) {  // dB' = A'^T G'
      q.a_new_dims = s.a_new_dims;
      q.transpose_a = !s.transpose_a;
      q.b_new_dims = s.squeeze_dims;
      gb = OperandGrad(a, g, q, b, s.b_new_dims);
    } else {  // dB'^T = G'^T A'
      q.a_new_dims = s.squeeze_dims;
      q.transpose_a = true;
      q.b_new_dims = s.a_new_dims;
      q.transpose_b = s.transpose_a;
      gb = OperandGrad(g, a, q, b, s.b_new_dims);
    }
  }
  return {ga, gb};
}

TensorList LinearBackward(const BackwardContext& c) {
  return LinearInputGrads(c.inputs[0], c.inputs[1], c.grad_outputs[0], c.needs_input_grad);
}

const OpDef& kMatmul = RegisterOp(
    {.name = "matmul", .cpu = MatmulKernel, .backward = MatmulBackward, .saved_input_readers = {{1}, {0}}});
const OpDef& kLinear = RegisterOp(
    {.name = "linear", .cpu = LinearKernel, .backward = LinearBackward, .saved_input_readers = {{1}, {0}, {}}});

const OpDef& MatmulOp() { return kMatmul; }

}  // namespace

Tensor Matmul(const Tensor& a, const Tensor& b) { return autograd::CallOp1(kMatmul, {a, b}); }

Tensor Linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return autograd::CallOp1(kLinear, {x, weight, bias});
}

void CheckLinearArgs(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias) {
  TESSEL_CHECK(w.dim() == 2, op, ": weight must be 2-D [out_features, in_features], got ", ShapeStr(w.sizes()));
  const int64_t in = x.dim() >= 1 ? x.size(x.dim() - 1) : 0;
  TESSEL_CHECK(x.dim() >= 1 && in == w.size(1), "mat1 and mat2 shapes cannot be multiplied (",
               x.dim() >= 1 ? x.numel() / std::max<int64_t>(in, 1) : 1, "x", in, " and ", w.size(1), "x", w.size(0),
               ") (", op, ": input ", ShapeStr(x.sizes()), " has in_features ", in, " but weight ", ShapeStr(w.sizes()),
               " expects ", w.size(1), ")");
  if (bias.defined()) {
    TESSEL_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0), op, ": bias ", ShapeStr(bias.sizes()),
                 " does not match weight ", ShapeStr(w.sizes()), " (expected [", w.size(0), "])");
    TESSEL_CHECK(bias.dtype() == x.dtype(), op, ": bias dtype ", bias.dtype(), " differs from input dtype ", x.dtype());
  }
}

Tensor LinearForward(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias,
                     const LinearEpilogue& after) {
  MatmulSpec s;
  s.transpose_b = true;
  if (x.dim() == 1) s.a_new_dims = s.squeeze_dims = {-2};
  return MatmulForward(op, x, w, s, bias, after);
}

TensorList LinearInputGrads(const Tensor& x, const Tensor& w, const Tensor& g,
                            std::span<const bool> needs) {
  Tensor gx, gw, gb;  // g: [..., out]
  if (!g.defined()) return {gx, gw, gb};
  if (needs[0]) gx = Matmul(g, w);  // [..., out] @ [out, in]
  if (needs[1]) {
    MatmulSpec q;
    if (x.dim() == 1) {  // outer product g ⊗ x
      q.a_new_dims = {-1};
      q.b_new_dims = {-2};
    } else {  // g^T @ x, the batch folded into the contraction
      q.transpose_a = true;
      q.sum_batch = true;
    }
    gw = CallMatmul(g, x, q);
  }
  if (needs.size() > 2 && needs[2]) gb = SumToSize(g, std::vector<int64_t>{w.size(0)});  // only with a bias
  return {gx, gw, gb};
}

}  // namespace tessel
