// bindings/functional_py.cc — the functions of tessel.nn.functional (torch.nn.functional's names and
// argument names), each one core op. Optional tensors (bias, weight) are None or a Tensor.
//
// Invariant: an argument torch accepts but tessel's op cannot honour (an attention mask, dropout in
// attention, a normalized_shape other than the last dim) raises NotImplementedError naming it; it is
// never silently ignored.
//
// Example (Python): y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "bindings/bind.h"
#include "core/base/error.h"
#include "core/ops/attention.h"
#include "core/ops/concat.h"
#include "core/ops/dropout.h"
#include "core/ops/batch_norm.h"
#include "core/ops/conv.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/index_dim.h"
#include "core/ops/pool.h"
#include "core/ops/scan_sort.h"
#include "core/ops/loss.h"
#include "core/ops/grouped_mm.h"
#include "core/ops/matmul.h"
#include "core/ops/norm.h"
#include "core/ops/softmax.h"
#include "core/ops/ternary.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"

namespace tessel::bindings {
namespace {

Tensor Opt(const std::optional<Tensor>& t) { return t ? *t : Tensor(); }

std::vector<int64_t> AsShape(const py::object& s) {
  if (py::isinstance<py::int_>(s)) return {s.cast<int64_t>()};
  return s.cast<std::vector<int64_t>>();
}

}  // namespace

void BindFunctional(py::module_& m) {
  py::module_ f = m.def_submodule("_functional", "tessel.nn.functional's ops");
  f.def("linear", [](const Tensor& x, const Tensor& w, std::optional<Tensor> b) {
    return NoGil([&] {
      // torch's 1-D weight: x·w over the last dim (a bias, if any, added after), shape [...] without it
      if (w.defined() && w.dim() == 1) return b && b->defined() ? Add(Matmul(x, w), *b) : Matmul(x, w);
      return Linear(x, w, Opt(b));
    });
  }, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none());
  // torch._grouped_mm's kernel (tessel/_grouped_mm.py checks the arguments as torch does first): `ends` are the
  // offsets as Python ints, empty for 3-D x 3-D
  f.def("grouped_mm", [](const Tensor& a, const Tensor& b, const std::vector<int64_t>& ends) {
    return NoGil([&] { return GroupedMm(a, b, ends); });
  }, py::arg("mat_a"), py::arg("mat_b"), py::arg("ends"));
  f.def("gelu", [](const Tensor& x, const std::string& approximate) { return NoGil([&] { return Gelu(x, approximate); }); },
        py::arg("input"), py::arg("approximate") = "none");
  f.def("silu", [](const Tensor& x) { return NoGil([&] { return Silu(x); }); }, py::arg("input"));
  f.def("relu", [](const Tensor& x) { return NoGil([&] { return Relu(x); }); }, py::arg("input"));
  f.def("tanh", [](const Tensor& x) { return NoGil([&] { return Tanh(x); }); }, py::arg("input"));
  f.def("sigmoid", [](const Tensor& x) { return NoGil([&] { return Sigmoid(x); }); }, py::arg("input"));
  // dtype= casts the input first, as torch (softmax in float32 of bfloat16 logits). No dim: torch's deprecated
  // implicit choice, with its warning (dim 0 for 0-, 1- and 3-D inputs, else 1).
  auto implicit_dim = [](const char* name, const Tensor& x, std::optional<int64_t> dim) -> int64_t {
    if (dim) return *dim;
    const std::string msg = Str("Implicit dimension choice for ", name, " has been deprecated. Change the call to "
                                "include dim=X as an argument.");
    if (PyErr_WarnEx(PyExc_UserWarning, msg.c_str(), 2) != 0) throw py::error_already_set();
    return x.dim() == 0 || x.dim() == 1 || x.dim() == 3 ? 0 : 1;
  };
  f.def("softmax", [implicit_dim](const Tensor& x, std::optional<int64_t> dim, int, std::optional<DType> dtype) {
    const int64_t d = implicit_dim("softmax", x, dim);
    return NoGil([&] { return Softmax(dtype && *dtype != x.dtype() ? Cast(x, *dtype) : x, d); });
  }, py::arg("input"), py::arg("dim") = py::none(), py::arg("_stacklevel") = 3, py::arg("dtype") = py::none());
  f.def("log_softmax", [implicit_dim](const Tensor& x, std::optional<int64_t> dim, int, std::optional<DType> dtype) {
    const int64_t d = implicit_dim("log_softmax", x, dim);
    return NoGil([&] { return LogSoftmax(dtype && *dtype != x.dtype() ? Cast(x, *dtype) : x, d); });
  }, py::arg("input"), py::arg("dim") = py::none(), py::arg("_stacklevel") = 3, py::arg("dtype") = py::none());
  f.def("layer_norm", [](const Tensor& x, const py::object& shape, std::optional<Tensor> w, std::optional<Tensor> b,
                         double eps) {
    const Shape dims = AsShape(shape);
    return NoGil([&] { return LayerNormOver(x, dims, Opt(w), Opt(b), eps); });
  }, py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(), py::arg("bias") = py::none(),
        py::arg("eps") = 1e-5);
  f.def("rms_norm", [](const Tensor& x, const py::object& shape, std::optional<Tensor> w, std::optional<double> eps) {
    const Shape dims = AsShape(shape);
    return NoGil([&] { return RmsNormOver(x, dims, Opt(w), eps.value_or(MachineEpsilon(x.dtype()))); });
  }, py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(), py::arg("eps") = py::none());
  f.def("embedding", [](const Tensor& idx, const Tensor& w, std::optional<int64_t> padding_idx,
                        const py::object& max_norm, double norm_type, bool scale_grad_by_freq, bool sparse) {
    TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, !sparse,
                      "embedding: sparse gradients are not supported (tessel has no sparse tensors)");
    const std::optional<double> limit = max_norm.is_none() ? std::nullopt : std::optional(max_norm.cast<double>());
    return NoGil([&] {
      if (limit) EmbeddingRenorm_(w, idx, *limit, norm_type);  // in place, before the lookup, as torch
      return Embedding(w, idx, padding_idx, scale_grad_by_freq);
    });
  }, py::arg("input"), py::arg("weight"), py::arg("padding_idx") = py::none(), py::arg("max_norm") = py::none(),
        py::arg("norm_type") = 2.0, py::arg("scale_grad_by_freq") = false, py::arg("sparse") = false);
  // conv1d / conv2d / conv3d's float32 path (nn/_conv_ops.py checks torch's arguments and routes here).
  f.def("_convolution", [](const Tensor& x, const Tensor& w, std::optional<Tensor> b, std::vector<int64_t> stride,
                           std::vector<int64_t> padding, std::vector<int64_t> padding_r, std::vector<int64_t> dilation,
                           int64_t groups) {
    const ConvOptions o{.stride = std::move(stride), .padding = std::move(padding), .padding_r = std::move(padding_r),
                        .dilation = std::move(dilation), .groups = groups};
    return NoGil([&] { return Convolution(x, w, Opt(b), o); });
  }, py::arg("input"), py::arg("weight"), py::arg("bias"), py::arg("stride"), py::arg("padding"),
        py::arg("padding_r"), py::arg("dilation"), py::arg("groups"));
  // conv_transpose1d / 2d / 3d's float32 / bfloat16 path: the input gradient of the convolution that maps the
  // transposed convolution's output (full shape output_shape) back onto its input, with the same weight.
  f.def("_conv_transpose", [](const Tensor& x, const Tensor& w, std::vector<int64_t> output_shape,
                              std::vector<int64_t> stride, std::vector<int64_t> padding, std::vector<int64_t> dilation,
                              int64_t groups) {
    const ConvOptions o{.stride = std::move(stride), .padding = std::move(padding), .dilation = std::move(dilation),
                        .groups = groups};
    return NoGil([&] { return ConvolutionBackwardInput(x, w, output_shape, o); });
  }, py::arg("input"), py::arg("weight"), py::arg("output_shape"), py::arg("stride"), py::arg("padding"),
        py::arg("dilation"), py::arg("groups"));
  // batch_norm's training form (nn/_conv_ops.py blends the running statistics from mean and var).
  f.def("_batch_norm_train", [](const Tensor& x, std::optional<Tensor> w, std::optional<Tensor> b, double eps) {
    return NoGil([&] {
      const BatchNormResult r = BatchNormTraining(x, Opt(w), Opt(b), eps);
      return std::make_tuple(r.y, r.mean, r.var);
    });
  }, py::arg("input"), py::arg("weight"), py::arg("bias"), py::arg("eps"));
  // max_pool*d's windows (nn/_conv_ops.py builds the [K, O] index with torch's geometry).
  f.def("_window_max", [](const Tensor& x, const Tensor& index) {
    return NoGil([&] { return WindowMax(x, index); });
  }, py::arg("input"), py::arg("index"));
  // cumsum, and sort / argsort / topk of plain tensors (tessel/_extra.py, _compat.py): the running sums along a
  // dim (differentiable) and each row's sorting permutation (the values are gathered with _gather_dim).
  f.def("_cumsum", [](const Tensor& x, int64_t dim, bool reverse) {
    return NoGil([&] { return CumSum(x, dim, reverse); });
  }, py::arg("input"), py::arg("dim"), py::arg("reverse") = false);
  f.def("_sort_indices", [](const Tensor& x, bool descending, int64_t k) {
    return NoGil([&] { return SortIndicesLastDim(x, descending, k); });
  }, py::arg("input"), py::arg("descending"), py::arg("k") = -1);
  f.def("_topk_indices", [](const Tensor& x, int64_t k, bool largest, bool sorted) {
    return NoGil([&] { return TopKIndicesLastDim(x, k, largest, sorted); });
  }, py::arg("input"), py::arg("k"), py::arg("largest"), py::arg("sorted") = true);
  // torch.gather / scatter_add of plain tensors (tessel/_compat.py, _scatter.py): index with input's sizes
  // off `dim` (the callers narrow input to a smaller index first).
  f.def("_gather_dim", [](const Tensor& x, int64_t dim, const Tensor& index) {
    return NoGil([&] { return GatherDim(x, dim, index); });
  }, py::arg("input"), py::arg("dim"), py::arg("index"));
  f.def("_index_select_dim", [](const Tensor& x, int64_t dim, const Tensor& index) {
    return NoGil([&] { return IndexSelectDim(x, dim, index); });
  }, py::arg("input"), py::arg("dim"), py::arg("index"));
  f.def("_scatter_add_dim", [](const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
    return NoGil([&] { return ScatterAddDim(self, dim, index, src); });
  }, py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("src"));
  f.def("_index_add_rows", [](const Tensor& source, const Tensor& index, int64_t num_rows) {
    return NoGil([&] { return IndexAddRows(source, index, num_rows); });
  }, py::arg("source"), py::arg("index"), py::arg("num_rows"));
  f.def("cat", [](const TensorList& ts, int64_t dim) { return NoGil([&] { return Cat(ts, dim); }); },
        py::arg("tensors"), py::arg("dim") = 0);
  f.def("stack", [](const TensorList& ts, int64_t dim) { return NoGil([&] { return Stack(ts, dim); }); },
        py::arg("tensors"), py::arg("dim") = 0);
  // torch.maximum / minimum of two tensors of one dtype (the Python face promotes mixed dtypes first).
  f.def("maximum", [](const Tensor& a, const Tensor& b) { return NoGil([&] { return Maximum(a, b); }); },
        py::arg("input"), py::arg("other"));
  f.def("minimum", [](const Tensor& a, const Tensor& b) { return NoGil([&] { return Minimum(a, b); }); },
        py::arg("input"), py::arg("other"));
  // torch.addcmul / addcdiv / lerp of tensors of one floating dtype (core/ops/ternary.h: torch's fused element
  // formulas). The in-place methods' C++ front is bindings/inplace_py.cc; the in-place forms below serve their
  // Python fallback (tessel/_composed.py: keyword operands, numpy numbers), which returns self.
  f.def("addcmul", [](const Tensor& s, const Tensor& a, const Tensor& b, double value) {
    return NoGil([&] { return Addcmul(s, a, b, value); });
  }, py::arg("input"), py::arg("tensor1"), py::arg("tensor2"), py::arg("value") = 1.0);
  f.def("addcdiv", [](const Tensor& s, const Tensor& a, const Tensor& b, double value) {
    return NoGil([&] { return Addcdiv(s, a, b, value); });
  }, py::arg("input"), py::arg("tensor1"), py::arg("tensor2"), py::arg("value") = 1.0);
  f.def("lerp", [](const Tensor& s, const Tensor& e, double w) { return NoGil([&] { return Lerp(s, e, w); }); },
        py::arg("input"), py::arg("end"), py::arg("weight"));
  f.def("lerp", [](const Tensor& s, const Tensor& e, const Tensor& w) {
    return NoGil([&] { return Lerp(s, e, w); });
  }, py::arg("input"), py::arg("end"), py::arg("weight"));
  f.def("addcmul_", [](const Tensor& s, const Tensor& a, const Tensor& b, double value) {
    NoGil([&] { AddcmulInPlace(s, a, b, value); });
  });
  f.def("addcdiv_", [](const Tensor& s, const Tensor& a, const Tensor& b, double value) {
    NoGil([&] { AddcdivInPlace(s, a, b, value); });
  });
  f.def("lerp_", [](const Tensor& s, const Tensor& e, double w) { NoGil([&] { LerpInPlace(s, e, w); }); });
  f.def("lerp_", [](const Tensor& s, const Tensor& e, const Tensor& w) { NoGil([&] { LerpInPlace(s, e, w); }); });
  // torch's refusal of an operand that partly overlaps a tensor written in place (core/ops/elementwise.h).
  f.def("_check_no_partial_overlap", [](const Tensor& dst, const Tensor& src, const std::string& op) {
    CheckNoPartialOverlap(dst, src, op.c_str());
  });
  f.def("where", [](const Tensor& c, const Tensor& a, const Tensor& b) {
    return NoGil([&] { const auto [x, y] = Promoted(a, b); return Where(c, x, y); });
  },
        py::arg("condition"), py::arg("input"), py::arg("other"));
  // torch.nn.functional.cross_entropy's signature; weight and the deprecated size_average / reduce raise.
  f.def("cross_entropy", [](const Tensor& logits, const Tensor& target, const py::object& weight,
                            const py::object& size_average, int64_t ignore_index, const py::object& reduce,
                            const std::string& reduction, double label_smoothing) {
    TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, weight.is_none() && size_average.is_none() && reduce.is_none(),
                      "cross_entropy: weight and the deprecated size_average / reduce are not supported");
    return NoGil([&] {
      if (logits.dim() <= 2) return CrossEntropy(logits, target, ignore_index, reduction, label_smoothing);
      // (N, C, d1, ...) with targets (N, d1, ...): classes last, one row per position, as torch.
      const int64_t classes = logits.size(1);
      Shape want = logits.sizes();
      want.erase(want.begin() + 1);
      TESSEL_CHECK(target.sizes() == want, "cross_entropy: input ", ShapeStr(logits.sizes()),
                   " needs targets of shape ", ShapeStr(want), " (N, d1, ...), got ", ShapeStr(target.sizes()));
      std::vector<int64_t> order{0};
      for (int64_t d = 2; d < logits.dim(); ++d) order.push_back(d);
      order.push_back(1);
      const Tensor rows = Reshape(Contiguous(Permute(logits, order)), {-1, classes});
      const Tensor per = CrossEntropy(rows, Reshape(Contiguous(target), {-1}), ignore_index, reduction, label_smoothing,
                                      /*rows_of_class_dim_1=*/true);
      return reduction == "none" ? Reshape(per, target.sizes()) : per;
    });
  }, py::arg("input"), py::arg("target"), py::arg("weight") = py::none(), py::arg("size_average") = py::none(),
        py::arg("ignore_index") = -100, py::arg("reduce") = py::none(), py::arg("reduction") = "mean",
        py::arg("label_smoothing") = 0.0);
  f.def("dropout", [](const Tensor& x, double p, bool training, Generator* gen) {
    Generator& g = GenOrDefault(gen);
    return NoGil([&] { return Dropout(x, p, g, training); });
  }, py::arg("input"), py::arg("p") = 0.5, py::arg("training") = true, py::arg("generator") = nullptr);
  // The fused kernels without autograd (context parallelism merges blocks of keys itself; core/ops/attention.h).
  f.def("_sdpa_forward", [](const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal, double scale) {
    return NoGil([&] { return AttentionForwardRaw(q, k, v, is_causal, scale); });
  }, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("is_causal"), py::arg("scale"));
  f.def("_sdpa_backward", [](const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, bool is_causal, double scale) {
    return NoGil([&] { return AttentionBackwardRaw(g, q, k, v, out, lse, is_causal, scale); });
  }, py::arg("grad_out"), py::arg("query"), py::arg("key"), py::arg("value"), py::arg("out"), py::arg("lse"),
        py::arg("is_causal"), py::arg("scale"));
  f.def("scaled_dot_product_attention", [](const Tensor& q, const Tensor& k, const Tensor& v,
                                           const std::optional<Tensor>& attn_mask, double dropout_p, bool is_causal,
                                           std::optional<double> scale, bool enable_gqa) {
    AttentionOptions o{.attn_mask = attn_mask.value_or(Tensor()), .dropout_p = dropout_p, .is_causal = is_causal,
                       .scale = scale, .generator = &DefaultGenerator()};
    // torch broadcasts the leading (batch, head) dims of equal-rank q, k, v (a key of batch 1 against queries
    // of batch 2): expanded views, read in place by the kernels, whose gradients Expand's backward sums.
    auto broadcast_lead = [](Tensor q, Tensor k, Tensor v) {
      auto lead = [](const Tensor& t) { return Shape(t.sizes().begin(), t.sizes().end() - 2); };
      if (q.dim() < 3 || k.dim() != q.dim() || v.dim() != q.dim() || (lead(q) == lead(k) && lead(q) == lead(v))) {
        return std::vector<Tensor>{q, k, v};
      }
      Shape b = lead(q);
      for (const Tensor& t : {k, v}) {
        const Shape l = lead(t);
        for (size_t i = 0; i < b.size(); ++i) {
          TESSEL_CHECK(b[i] == l[i] || b[i] == 1 || l[i] == 1, "scaled_dot_product_attention: the leading ",
                       "(batch / head) dims of query ", ShapeStr(q.sizes()), ", key ", ShapeStr(k.sizes()),
                       " and value ", ShapeStr(v.sizes()), " do not broadcast (dim ", i, ": ", b[i], " vs ", l[i], ")");
          if (b[i] == 1) b[i] = l[i];
        }
      }
      std::vector<Tensor> out;
      for (const Tensor& t : {q, k, v}) {
        Shape s = b;
        s.push_back(t.size(-2)), s.push_back(t.size(-1));
        out.push_back(t.sizes() == s ? t : Expand(t, s));
      }
      return out;
    };
    if (!enable_gqa) {
      const std::vector<Tensor> qkv = broadcast_lead(q, k, v);
      return NoGil([&] { return ScaledDotProductAttention(qkv[0], qkv[1], qkv[2], o); });
    }
    // Grouped-query attention (torch 2.5+): query heads in groups of Hq / Hkv share one key/value head,
    // as if k and v were repeat_interleave'd on dim -3 (torch's math path does exactly that).
    TESSEL_CHECK(q.dim() >= 3 && k.dim() == q.dim() && v.dim() == q.dim(), "scaled_dot_product_attention: ",
                 "enable_gqa=True needs query, key and value of one rank >= 3 ([..., heads, L, E]), got ",
                 ShapeStr(q.sizes()), ", ", ShapeStr(k.sizes()), ", ", ShapeStr(v.sizes()));
    const int64_t hq = q.size(-3), hk = k.size(-3), hv = v.size(-3);
    TESSEL_CHECK(hk > 0 && hv > 0 && hq % hk == 0 && hq % hv == 0, "scaled_dot_product_attention: ",
                 "enable_gqa=True needs the key and value head counts to divide the query's (dim -3): query ",
                 ShapeStr(q.sizes()), ", key ", ShapeStr(k.sizes()), ", value ", ShapeStr(v.sizes()));
    auto repeat_heads = [](const Tensor& t, int64_t times) {
      if (times == 1) return t;
      Shape wide = t.sizes();
      wide.insert(wide.end() - 2, times);  // [..., H, times, S, E]
      Shape out = t.sizes();
      out[out.size() - 3] *= times;
      return Reshape(Expand(Unsqueeze(t, -3), wide), out);
    };
    const std::vector<Tensor> qkv = broadcast_lead(q, repeat_heads(k, hq / hk), repeat_heads(v, hq / hv));
    return NoGil([&] { return ScaledDotProductAttention(qkv[0], qkv[1], qkv[2], o); });
  }, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("attn_mask") = py::none(), py::arg("dropout_p") = 0.0,
        py::arg("is_causal") = false, py::kw_only(), py::arg("scale") = py::none(), py::arg("enable_gqa") = false);
}

}  // namespace tessel::bindings
