// core/ops/conv.cc — ops "convolution", "convolution_backward_input" and "convolution_backward_weight"
// (conv.h): CPU kernels on oneDNN 2.6's convolution primitives, backward formulas.
//
// Why oneDNN: its JIT picks the machine's kernels at run time (AVX-512 or AVX2 direct and 1×1
// convolutions, brgemm), so the one portable binary runs each CPU at its speed. Measured on an Intel
// Xeon (family 6 model 167, 2 vCPUs), [32, 64, 32, 32] * [64, 64, 3, 3] forward + both backward products
// with the plain NCHW/OIHW layouts oneDNN reads directly: its "gemm:jit" (im2col) path 46 ms; with the
// layout left to oneDNN ("any": blocked nChw16c) plus reorders from and to NCHW 21 ms (2.1 ms of it
// reorders; 338 GFLOP/s); the im2col gather + batched matmul this replaced (bindings' _conv_ops.py)
// 242 ms, PyTorch 2.15 59–71 ms. So each primitive runs on oneDNN's preferred layouts and reorders at its
// edges (the Arg list of a cached Primitive), and the caller's tensors stay NCHW.
//
// Threads: each call splits the batch into min(NumThreads(), N) slices on tessel's pool (parallel.h),
// each slice one single-threaded primitive (dnnl_common.h's OneOmpThread); a slice of the weight
// gradient is a partial sum, added in slice order. Primitives are created once per (kind, slice
// geometry) and shared by all threads; every execution brings its own reorder and scratch buffers
// (tessel tensors, so the allocator counts them).
//
// bfloat16 (autocast's convolutions): where oneDNN's bf16 kernels are fast (DnnlHasFastBf16, gemm_dnnl.h:
// AMX-BF16, or AMD's AVX512-BF16) the primitives read and write bf16 and accumulate in fp32 (the weight
// gradient in fp32 too: its slices' partial sums are added in fp32 and rounded once); elsewhere the
// operands are converted to fp32, the fp32 primitives run and the result is rounded once to bf16 — the same
// products and fp32 sums, so both paths agree up to summation order. Measured on the Xeon above: a small
// CNN's bf16 autocast training step 615 ms with the composed bf16 convolutions, against PyTorch 2.15's 50
// ms. On an AMD EPYC (Zen 4, 2 vCPUs) the AVX512-BF16 primitives against the fp32 ones on bf16 values:
// that step (benchmarks/python/cnn_step.py --autocast) 350 -> 504 images/s.
//
// Differentiation: the three ops are the partial derivatives of one trilinear form <conv(x, w), g>,
// so each one's backward is two of the others (conv.h); all of it goes through autograd::CallOp, so a
// create_graph backward records convolutions again and gradients of gradients exist to any order.
#include "core/ops/conv.h"

#include <algorithm>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/op.h"
#include "core/ops/dnnl_common.h"
#include "core/ops/gemm_dnnl.h"
#include "core/ops/reduction.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

constexpr char kConv[] = "convolution";
constexpr char kBackwardInput[] = "convolution_backward_input";
constexpr char kBackwardWeight[] = "convolution_backward_weight";

using Dims = dnnl::memory::dims;
using DT = dnnl::memory::data_type;

// One convolution's sizes and options, validated (MakeGeometry).
struct Geometry {
  int64_t nd = 0, n = 0, c = 0, oc = 0, groups = 1;
  Shape in, kernel, out, stride, dilation, pad_l, pad_r;

  Shape InputShape() const { return Joined({n, c}, in); }
  Shape WeightShape() const { return Joined({oc, c / groups}, kernel); }
  Shape OutputShape() const { return Joined({n, oc}, out); }
  int64_t InputSample() const { return c * Product(in); }
  int64_t OutputSample() const { return oc * Product(out); }
  std::string Options() const {
    return Str("stride ", ShapeStr(stride), ", padding ", ShapeStr(pad_l), " / ", ShapeStr(pad_r), ", dilation ",
               ShapeStr(dilation), ", groups ", groups);
  }

  static Shape Joined(Shape head, const Shape& tail) {
    head.insert(head.end(), tail.begin(), tail.end());
    return head;
  }
  static int64_t Product(const Shape& s) {
    int64_t p = 1;
    for (int64_t v : s) p *= v;
    return p;
  }
};

// The conv attrs of `options` for an input of x_shape (nd = its spatial dims): each list expanded to nd
// values.
Attrs ConvAttrs(const ConvOptions& o, const Shape& x_shape, const char* op) {
  const int64_t nd = static_cast<int64_t>(x_shape.size()) - 2;
  TESSEL_CHECK(nd >= 1 && nd <= 3, op, ": expected a 3-D, 4-D or 5-D input [N, C, *spatial], got ", ShapeStr(x_shape));
  auto expand = [&](const std::vector<int64_t>& v, int64_t dflt, const char* name) {
    if (v.empty()) return Shape(static_cast<size_t>(nd), dflt);
    if (v.size() == 1) return Shape(static_cast<size_t>(nd), v[0]);
    TESSEL_CHECK(static_cast<int64_t>(v.size()) == nd, op, ": ", name, " must have one value or one per spatial dim (",
                 nd, "), got ", ShapeStr(v));
    return Shape(v);
  };
  const Shape padding = expand(o.padding, 0, "padding");
  return Attrs()
      .Set("stride", expand(o.stride, 1, "stride"))
      .Set("padding", padding)
      .Set("padding_r", o.padding_r.empty() ? padding : expand(o.padding_r, 0, "padding_r"))
      .Set("dilation", expand(o.dilation, 1, "dilation"))
      .Set("groups", o.groups);
}

// Only the conv options of `attrs` (drops a backward op's "shape").
Attrs ConvOnly(const Attrs& a) {
  return Attrs()
      .Set("stride", a.GetInts("stride"))
      .Set("padding", a.GetInts("padding"))
      .Set("padding_r", a.GetInts("padding_r"))
      .Set("dilation", a.GetInts("dilation"))
      .Set("groups", a.GetInt("groups"));
}

Attrs WithShape(const Attrs& a, const Shape& shape) {
  Attrs out = ConvOnly(a);
  out.Set("shape", shape);
  return out;
}

// The geometry of input x_shape convolved with weight w_shape under attrs; every torch check.
Geometry MakeGeometry(const char* op, const Shape& x_shape, const Shape& w_shape, const Attrs& a) {
  const int64_t dims = static_cast<int64_t>(x_shape.size());
  TESSEL_CHECK(dims >= 3 && dims <= 5, op, ": expected a 3-D, 4-D or 5-D input [N, C, *spatial], got ",
               ShapeStr(x_shape));
  TESSEL_CHECK(static_cast<int64_t>(w_shape.size()) == dims, op, ": expected a ", dims,
               "-D weight [out_channels, in_channels / groups, *kernel] for input ", ShapeStr(x_shape), ", got ",
               ShapeStr(w_shape));
  Geometry g;
  g.nd = dims - 2;
  g.n = x_shape[0], g.c = x_shape[1], g.oc = w_shape[0], g.groups = a.GetInt("groups");
  g.in.assign(x_shape.begin() + 2, x_shape.end());
  g.kernel.assign(w_shape.begin() + 2, w_shape.end());
  g.stride = a.GetInts("stride"), g.dilation = a.GetInts("dilation");
  g.pad_l = a.GetInts("padding"), g.pad_r = a.GetInts("padding_r");
  for (const Shape* s : {&g.stride, &g.dilation, &g.pad_l, &g.pad_r}) {
    TESSEL_CHECK(static_cast<int64_t>(s->size()) == g.nd, op, ": options need one value per spatial dim (", g.nd,
                 "): ", g.Options());
  }
  TESSEL_CHECK(g.groups >= 1 && g.oc % g.groups == 0, op, ": out_channels (", g.oc, ") must be divisible by groups (",
               g.groups, "); weight ", ShapeStr(w_shape));
  TESSEL_CHECK(g.c == w_shape[1] * g.groups, op, ": given groups=", g.groups, ", weight ", ShapeStr(w_shape),
               " expects input ", ShapeStr(x_shape), " to have ", w_shape[1] * g.groups, " channels, but it has ", g.c);
  for (int64_t i = 0; i < g.nd; ++i) {
    const size_t d = static_cast<size_t>(i);
    TESSEL_CHECK(g.stride[d] >= 1 && g.dilation[d] >= 1 && g.pad_l[d] >= 0 && g.pad_r[d] >= 0 && g.kernel[d] >= 1, op,
                 ": stride and dilation must be positive, padding non-negative and the kernel non-empty; ",
                 g.Options(), ", weight ", ShapeStr(w_shape));
    const int64_t padded = g.in[d] + g.pad_l[d] + g.pad_r[d], span = g.dilation[d] * (g.kernel[d] - 1) + 1;
    TESSEL_CHECK(padded >= span, op, ": the padded input (", padded, " along spatial dim ", i,
                 ") is smaller than the dilated kernel (", span, "): input ", ShapeStr(x_shape), ", weight ",
                 ShapeStr(w_shape), ", ", g.Options());
    g.out.push_back((padded - span) / g.stride[d] + 1);
  }
  return g;
}

// The operands' common dtype: all float32 or all bfloat16, on the CPU.
DType CheckOperands(const char* op, std::initializer_list<const Tensor*> ts) {
  const DType dt = (*ts.begin())->dtype();
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    TESSEL_CHECK((dt == DType::kFloat32 || dt == DType::kBFloat16) && t->dtype() == dt && t->device().is_cpu(), op,
                 ": float32 or bfloat16 CPU tensors, all of one dtype (oneDNN's kernels), got ", t->dtype(), " on ",
                 t->device(), " of shape ", ShapeStr(t->sizes()), " with a first operand of ", dt,
                 " (torch ports: tessel.nn.functional composes other dtypes)");
  }
  return dt;
}

// ---- primitives ---------------------------------------------------------------------------------------

enum class Kind { kForward, kBackwardInput, kBackwardWeight };

// One argument of a primitive: the caller's dense row-major layout, the layout the primitive reads or
// writes, and the reorder between them when they differ.
struct Arg {
  int id;  // DNNL_ARG_*
  dnnl::memory::desc plain, inner;
  bool output;
  std::optional<dnnl::reorder> reorder;  // plain -> inner for inputs, inner -> plain for outputs
};

struct Primitive {
  dnnl::primitive prim;
  std::vector<Arg> args;
  dnnl::memory::desc scratch;
};

dnnl::memory::desc Plain(const Dims& dims, DT dt) {
  Dims strides(dims.size(), 1);
  for (size_t i = dims.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * dims[i];
  return dnnl::memory::desc(dims, dt, strides);
}
dnnl::memory::desc Any(const Dims& dims, DT dt) { return dnnl::memory::desc(dims, dt, dnnl::memory::format_tag::any); }

// inner's dims and data type, the caller's dense row-major layout.
Arg MakeArg(int id, const dnnl::memory::desc& inner, bool output) {
  Arg a{id, Plain(inner.dims(), inner.data_type()), inner, output, std::nullopt};
  if (a.plain != a.inner) {
    const dnnl::memory::desc& from = output ? a.inner : a.plain;
    const dnnl::memory::desc& to = output ? a.plain : a.inner;
    a.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(DnnlEngine(), from, DnnlEngine(), to));
  }
  return a;
}

// The primitive of `kind` for geometry g (g.n: the slice's batch) on data type dt (f32 or bf16; a bf16
// weight gradient is written in f32), arguments in the order Run takes their pointers: forward (src,
// weights, [bias,] dst), backward input (diff_dst, weights, diff_src), backward weight (src, diff_dst,
// diff_weights).
std::shared_ptr<const Primitive> Create(Kind kind, const Geometry& g, bool bias, DT dt) {
  const Dims src = g.InputShape(), dst = g.OutputShape();
  Dims wei = g.WeightShape();
  if (g.groups > 1) {  // oneDNN's grouped weights [G, OC/G, C/G, *k]: the same memory as torch's [OC, C/G, *k]
    wei[0] = g.oc / g.groups;
    wei.insert(wei.begin(), g.groups);
  }
  Dims dilates = g.dilation;
  for (int64_t& d : dilates) d -= 1;  // oneDNN counts the gaps
  const dnnl::memory::desc src_any = Any(src, dt), wei_any = Any(wei, dt), dst_any = Any(dst, dt);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  using Fwd = dnnl::convolution_forward;
  const auto algo = dnnl::algorithm::convolution_direct;
  const Fwd::primitive_desc hint(Fwd::desc(dnnl::prop_kind::forward_training, algo, src_any, wei_any, dst_any,
                                           g.stride, dilates, g.pad_l, g.pad_r),
                                 DnnlEngine());
  auto p = std::make_shared<Primitive>();
  switch (kind) {
    case Kind::kForward: {
      const Fwd::desc d = bias ? Fwd::desc(dnnl::prop_kind::forward_training, algo, src_any, wei_any, Plain({g.oc}, dt),
                                           dst_any, g.stride, dilates, g.pad_l, g.pad_r)
                               : Fwd::desc(dnnl::prop_kind::forward_training, algo, src_any, wei_any, dst_any,
                                           g.stride, dilates, g.pad_l, g.pad_r);
      const Fwd::primitive_desc pd(d, attr, DnnlEngine());
      p->args = {MakeArg(DNNL_ARG_SRC, pd.src_desc(), false), MakeArg(DNNL_ARG_WEIGHTS, pd.weights_desc(), false)};
      if (bias) p->args.push_back(MakeArg(DNNL_ARG_BIAS, pd.bias_desc(), false));
      p->args.push_back(MakeArg(DNNL_ARG_DST, pd.dst_desc(), true));
      p->scratch = pd.scratchpad_desc();
      p->prim = Fwd(pd);
      break;
    }
    case Kind::kBackwardInput: {
      using Bwd = dnnl::convolution_backward_data;
      const Bwd::primitive_desc pd(
          Bwd::desc(algo, src_any, wei_any, dst_any, g.stride, dilates, g.pad_l, g.pad_r), attr, DnnlEngine(), hint);
      p->args = {MakeArg(DNNL_ARG_DIFF_DST, pd.diff_dst_desc(), false), MakeArg(DNNL_ARG_WEIGHTS, pd.weights_desc(), false),
                 MakeArg(DNNL_ARG_DIFF_SRC, pd.diff_src_desc(), true)};
      p->scratch = pd.scratchpad_desc();
      p->prim = Bwd(pd);
      break;
    }
    case Kind::kBackwardWeight: {
      using Bwd = dnnl::convolution_backward_weights;
      const Bwd::primitive_desc pd(Bwd::desc(algo, src_any, Any(wei, DT::f32), dst_any, g.stride, dilates,
                                             g.pad_l, g.pad_r),
                                   attr, DnnlEngine(), hint);
      p->args = {MakeArg(DNNL_ARG_SRC, pd.src_desc(), false), MakeArg(DNNL_ARG_DIFF_DST, pd.diff_dst_desc(), false),
                 MakeArg(DNNL_ARG_DIFF_WEIGHTS, pd.diff_weights_desc(), true)};
      p->scratch = pd.scratchpad_desc();
      p->prim = Bwd(pd);
      break;
    }
  }
  return p;
}

std::shared_ptr<const Primitive> Lookup(Kind kind, const Geometry& g, bool bias, DT dt) {
  std::vector<int64_t> key = {static_cast<int64_t>(kind), static_cast<int64_t>(dt), g.n, g.c, g.oc, g.groups, bias ? 1 : 0};
  for (const Shape* s : {&g.in, &g.kernel, &g.stride, &g.dilation, &g.pad_l, &g.pad_r}) {
    key.insert(key.end(), s->begin(), s->end());
  }
  // At most 1024 primitives (a network has a few dozen shapes); leaked: used while statics are destroyed.
  static auto* cache = new PrimitiveCache<std::vector<int64_t>, Primitive>(1024);
  return cache->Get(key, [&] {
    // Created under the one-thread OpenMP cap it will run under: oneDNN plans a primitive's threads
    // (e.g. the weight gradient's reduction) at creation, and one planned for the process's 2 threads
    // opens a 2-thread team of its own from each of tessel's slices: 4 spinning threads on 2 cores, and
    // calls that stalled ~250 ms (bf16 [64, 64, 16, 16] weight gradient: p90 257 ms against a 2 ms median).
    const OneOmpThread one_thread;
    try {
      return Create(kind, g, bias, dt);
    } catch (const dnnl::error& e) {
      TESSEL_FAIL(ErrorCode::kInternal, kConv, ": oneDNN has no convolution for input ", ShapeStr(g.InputShape()),
                  ", weight ", ShapeStr(g.WeightShape()), ", ", g.Options(), ": ", e.what());
    }
  });
}

// Runs p on the calling thread with one caller pointer per argument (dense row-major, p.args' order).
void Run(const Primitive& p, std::span<void* const> ptrs) {
  const OneOmpThread one_thread;
  thread_local std::unique_ptr<dnnl::stream> stream;
  if (!stream) stream = std::make_unique<dnnl::stream>(DnnlEngine());
  std::vector<Tensor> buffers;  // reordered copies and the scratchpad, alive until the primitive is done
  auto buffer = [&](const dnnl::memory::desc& md) {
    buffers.push_back(Empty({static_cast<int64_t>(md.get_size() / sizeof(float)) + 1}, DType::kFloat32));
    return buffers.back().raw_data();
  };
  std::unordered_map<int, dnnl::memory> exec;
  std::vector<std::pair<dnnl::memory, dnnl::memory>> outputs;  // (inner, plain) to reorder back
  for (size_t i = 0; i < p.args.size(); ++i) {
    const Arg& a = p.args[i];
    dnnl::memory user(a.plain, DnnlEngine(), ptrs[i]);
    if (!a.reorder) {
      exec.emplace(a.id, user);
      continue;
    }
    dnnl::memory inner(a.inner, DnnlEngine(), buffer(a.inner));
    if (a.output) {
      outputs.emplace_back(inner, user);
    } else {
      a.reorder->execute(*stream, user, inner);
    }
    exec.emplace(a.id, inner);
  }
  if (p.scratch.get_size() > 0) exec.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p.scratch, DnnlEngine(), buffer(p.scratch)));
  try {
    p.prim.execute(*stream, exec);
    size_t k = 0;
    for (const Arg& a : p.args) {
      if (a.output && a.reorder) {
        a.reorder->execute(*stream, outputs[k].first, outputs[k].second);
        ++k;
      }
    }
    stream->wait();
  } catch (const dnnl::error& e) {  // a created primitive should not fail: a tessel bug
    TESSEL_FAIL(ErrorCode::kInternal, kConv, ": oneDNN execution failed: ", e.what());
  }
}

// How many slices a batch of n splits into: one per thread of the budget, at most one per sample.
int64_t SliceCount(int64_t n) { return std::max<int64_t>(1, std::min<int64_t>(NumThreads(), n)); }

// fn(slice, first sample, samples) for the SliceCount(n) slices of the batch, on the pool.
template <typename Fn>
void ForSlices(int64_t n, Fn fn) {
  const int64_t slices = SliceCount(n);
  const int64_t base = n / slices, extra = n % slices;
  ParallelFor(0, slices, 1, [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) fn(s, s * base + std::min(s, extra), base + (s < extra ? 1 : 0));
  });
}

float* F32(const Tensor& t) { return static_cast<float*>(t.raw_data()); }
// Element `offset` of dense t's data.
void* At(const Tensor& t, int64_t offset) { return static_cast<char*>(t.raw_data()) + offset * ElementSize(t.dtype()); }
DT DnnlType(DType dt) { return dt == DType::kBFloat16 ? DT::bf16 : DT::f32; }

// A bfloat16 call without fast bf16 kernels (or on a degenerate shape): kernel on the operands in
// float32, its outputs rounded once to bfloat16.
template <typename Kernel>
TensorList ViaFloat32(Kernel kernel, std::span<const Tensor> in, const Attrs& attrs) {
  std::vector<Tensor> f32;
  for (const Tensor& t : in) f32.push_back(DenseAs(t, DType::kFloat32));
  TensorList out = kernel(f32, attrs);
  for (Tensor& t : out) t = DenseAs(t, DType::kBFloat16);
  return out;
}
// Whether a call in dt takes ViaFloat32: bfloat16 without fast bf16 kernels, or on a degenerate shape.
bool Bf16ViaFloat32(DType dt, const Geometry& g) {
  return dt == DType::kBFloat16 && !(DnnlHasFastBf16() && g.n > 0 && g.c > 0 && g.oc > 0);
}

Geometry Slice(Geometry g, int64_t n) {
  g.n = n;
  return g;
}

// ---- kernels --------------------------------------------------------------------------------------------

// in: input, weight, bias?
TensorList ConvKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor bias_in = in.size() > 2 ? in[2] : Tensor();
  const DType dt = CheckOperands(kConv, {&in[0], &in[1], &bias_in});
  const Geometry g = MakeGeometry(kConv, in[0].sizes(), in[1].sizes(), attrs);
  TESSEL_CHECK(!bias_in.defined() || bias_in.sizes() == Shape{g.oc}, kConv, ": expected bias [", g.oc,
               "] for weight ", ShapeStr(in[1].sizes()), ", got ", ShapeStr(bias_in.sizes()));
  if (Bf16ViaFloat32(dt, g)) return ViaFloat32(ConvKernel, in, attrs);
  const Tensor x = DenseOrCopy(in[0]), w = DenseOrCopy(in[1]), bias = DenseOrCopy(bias_in);
  if (g.n == 0 || g.oc == 0) return {Empty(g.OutputShape(), DType::kFloat32)};
  if (g.c == 0) {  // no input channels: the bias alone (oneDNN has no such primitive)
    Tensor out = Zeros(g.OutputShape(), DType::kFloat32);
    if (bias.defined()) {
      const int64_t per = Geometry::Product(g.out);
      for (int64_t i = 0; i < g.n * g.oc; ++i) std::fill_n(F32(out) + i * per, per, F32(bias)[i % g.oc]);
    }
    return {out};
  }
  Tensor out = Empty(g.OutputShape(), dt);
  ForSlices(g.n, [&](int64_t, int64_t first, int64_t count) {
    const std::shared_ptr<const Primitive> p = Lookup(Kind::kForward, Slice(g, count), bias.defined(), DnnlType(dt));
    std::vector<void*> ptrs = {At(x, first * g.InputSample()), w.raw_data()};
    if (bias.defined()) ptrs.push_back(bias.raw_data());
    ptrs.push_back(At(out, first * g.OutputSample()));
    Run(*p, ptrs);
  });
  return {out};
}

// in: grad [N, OC, *out], weight; attr "shape": the input's shape.
TensorList BackwardInputKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const DType dt = CheckOperands(kBackwardInput, {&in[0], &in[1]});
  const Geometry g = MakeGeometry(kBackwardInput, attrs.GetInts("shape"), in[1].sizes(), attrs);
  TESSEL_CHECK(in[0].sizes() == g.OutputShape(), kBackwardInput, ": expected grad ", ShapeStr(g.OutputShape()),
               " for input ", ShapeStr(g.InputShape()), " and weight ", ShapeStr(in[1].sizes()), ", got ",
               ShapeStr(in[0].sizes()));
  if (Bf16ViaFloat32(dt, g)) return ViaFloat32(BackwardInputKernel, in, attrs);
  const Tensor grad = DenseOrCopy(in[0]), w = DenseOrCopy(in[1]);
  if (g.n == 0 || g.c == 0) return {Empty(g.InputShape(), DType::kFloat32)};
  if (g.oc == 0) return {Zeros(g.InputShape(), DType::kFloat32)};
  Tensor out = Empty(g.InputShape(), dt);
  ForSlices(g.n, [&](int64_t, int64_t first, int64_t count) {
    const std::shared_ptr<const Primitive> p = Lookup(Kind::kBackwardInput, Slice(g, count), false, DnnlType(dt));
    void* const ptrs[] = {At(grad, first * g.OutputSample()), w.raw_data(), At(out, first * g.InputSample())};
    Run(*p, ptrs);
  });
  return {out};
}

// in: input, grad [N, OC, *out]; attr "shape": the weight's shape.
TensorList BackwardWeightKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const DType dt = CheckOperands(kBackwardWeight, {&in[0], &in[1]});
  const Geometry g = MakeGeometry(kBackwardWeight, in[0].sizes(), attrs.GetInts("shape"), attrs);
  TESSEL_CHECK(in[1].sizes() == g.OutputShape(), kBackwardWeight, ": expected grad ", ShapeStr(g.OutputShape()),
               " for input ", ShapeStr(g.InputShape()), " and weight ", ShapeStr(g.WeightShape()), ", got ",
               ShapeStr(in[1].sizes()));
  if (Bf16ViaFloat32(dt, g)) return ViaFloat32(BackwardWeightKernel, in, attrs);
  const Tensor x = DenseOrCopy(in[0]), grad = DenseOrCopy(in[1]);
  if (g.n == 0 || g.c == 0 || g.oc == 0) return {Zeros(g.WeightShape(), DType::kFloat32)};
  Tensor out = Empty(g.WeightShape(), DType::kFloat32);  // fp32 for bf16 operands too (rounded at the end)
  const int64_t slices = SliceCount(g.n);
  const int64_t numel = out.numel();
  // Slice 0 writes the result; the others their partial sums, added below in slice order.
  const Tensor partial = slices > 1 ? Empty({slices - 1, numel}, DType::kFloat32) : Tensor();
  ForSlices(g.n, [&](int64_t slice, int64_t first, int64_t count) {
    const std::shared_ptr<const Primitive> p = Lookup(Kind::kBackwardWeight, Slice(g, count), false, DnnlType(dt));
    float* dst = slice == 0 ? F32(out) : F32(partial) + (slice - 1) * numel;
    void* const ptrs[] = {At(x, first * g.InputSample()), At(grad, first * g.OutputSample()), dst};
    Run(*p, ptrs);
  });
  float* o = F32(out);
  for (int64_t s = 1; s < slices; ++s) {
    const float* q = F32(partial) + (s - 1) * numel;
    for (int64_t i = 0; i < numel; ++i) o[i] += q[i];
  }
  return {DenseAs(out, dt)};
}

// ---- backward formulas --------------------------------------------------------------------------------

const OpDef& ConvOp();
const OpDef& BackwardInputOp();
const OpDef& BackwardWeightOp();

// y = conv(x, w) + b: dx = backward_input(g, w), dw = backward_weight(x, g), db = Σ g over N and space.
TensorList ConvBackward(const BackwardContext& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &g = c.grad_outputs[0];
  TensorList out(c.inputs.size());
  if (c.needs_input_grad[0]) out[0] = autograd::CallOp1(BackwardInputOp(), {g, w}, WithShape(c.attrs, x.sizes()));
  if (c.needs_input_grad[1]) out[1] = autograd::CallOp1(BackwardWeightOp(), {x, g}, WithShape(c.attrs, w.sizes()));
  if (c.inputs.size() > 2 && c.needs_input_grad[2]) {
    std::vector<int64_t> dims = {0};
    for (int64_t d = 2; d < g.dim(); ++d) dims.push_back(d);
    out[2] = Sum(g, dims);
  }
  return out;
}

// dx = backward_input(g, w) with upstream u (x's shape): d/dg = conv(u, w), d/dw = backward_weight(u, g).
TensorList BackwardInputBackward(const BackwardContext& c) {
  const Tensor &g = c.inputs[0], &w = c.inputs[1], &u = c.grad_outputs[0];
  TensorList out(2);
  if (c.needs_input_grad[0]) out[0] = autograd::CallOp1(ConvOp(), {u, w}, ConvOnly(c.attrs));
  if (c.needs_input_grad[1]) out[1] = autograd::CallOp1(BackwardWeightOp(), {u, g}, WithShape(c.attrs, w.sizes()));
  return out;
}

// dw = backward_weight(x, g) with upstream u (w's shape): d/dx = backward_input(g, u), d/dg = conv(x, u).
TensorList BackwardWeightBackward(const BackwardContext& c) {
  const Tensor &x = c.inputs[0], &g = c.inputs[1], &u = c.grad_outputs[0];
  TensorList out(2);
  if (c.needs_input_grad[0]) out[0] = autograd::CallOp1(BackwardInputOp(), {g, u}, WithShape(c.attrs, x.sizes()));
  if (c.needs_input_grad[1]) out[1] = autograd::CallOp1(ConvOp(), {x, u}, ConvOnly(c.attrs));
  return out;
}

const OpDef& ConvOp() {
  static const OpDef& op =
      RegisterOp({.name = kConv, .cpu = ConvKernel, .backward = ConvBackward, .saved_inputs = {0, 1}});
  return op;
}
const OpDef& BackwardInputOp() {
  static const OpDef& op = RegisterOp({.name = kBackwardInput, .cpu = BackwardInputKernel, .backward = BackwardInputBackward});
  return op;
}
const OpDef& BackwardWeightOp() {
  static const OpDef& op =
      RegisterOp({.name = kBackwardWeight, .cpu = BackwardWeightKernel, .backward = BackwardWeightBackward});
  return op;
}
const bool kRegistered = (ConvOp(), BackwardInputOp(), BackwardWeightOp(), true);

}  // namespace

Tensor Convolution(const Tensor& input, const Tensor& weight, const Tensor& bias, const ConvOptions& options) {
  const Attrs attrs = ConvAttrs(options, input.sizes(), kConv);
  if (bias.defined()) return autograd::CallOp1(ConvOp(), {input, weight, bias}, attrs);
  return autograd::CallOp1(ConvOp(), {input, weight}, attrs);
}

Tensor ConvolutionBackwardInput(const Tensor& grad, const Tensor& weight, const std::vector<int64_t>& input_shape,
                                const ConvOptions& options) {
  Attrs attrs = ConvAttrs(options, input_shape, kBackwardInput);
  attrs.Set("shape", input_shape);
  return autograd::CallOp1(BackwardInputOp(), {grad, weight}, attrs);
}

Tensor ConvolutionBackwardWeight(const Tensor& input, const Tensor& grad, const std::vector<int64_t>& weight_shape,
                                 const ConvOptions& options) {
  Attrs attrs = ConvAttrs(options, input.sizes(), kBackwardWeight);
  attrs.Set("shape", weight_shape);
  return autograd::CallOp1(BackwardWeightOp(), {input, grad}, attrs);
}

}  // namespace tessel
