// tp/styles/style_util.cc — the input/output conversions shared by the styles, and StyleName/ToString.
#include "core/base/error.h"
#include "tp/styles/styles.h"

namespace tessel::tp {
namespace internal {

Placement Normalize(const Placement& p, int64_t ndim, const std::string& who) {
  const dtensor::Shard* s = std::get_if<dtensor::Shard>(&p);
  if (s == nullptr) return p;
  TESSEL_CHECK(s->dim >= -ndim && s->dim < ndim, who, ": layout ", dtensor::ToString(p), " is out of range for a ",
               ndim, "-dim tensor");
  return dtensor::Shard{s->dim < 0 ? s->dim + ndim : s->dim};
}

dtensor::DTensor PrepareInput(const Tensor& x, const Placement& layout, const std::optional<Placement>& desired,
                              const DeviceMesh& mesh, const std::string& who, const std::optional<Shape>& shape) {
  TESSEL_CHECK(x.defined(), who, ": got an undefined input");
  const Placement want = Normalize(layout, x.dim(), who);
  dtensor::DTensor d;
  if (x.is_distributed()) {
    // As torch's styles: the declared layout annotates plain tensors only; a DTensor input brings its own
    // and is moved to the layout the module needs (desired, else declared). It used to be an error when
    // the two differed, so ColwiseParallel() right after a SequenceParallel norm's Shard(1) output raised.
    d = dtensor::DTensor(x);
    TESSEL_CHECK(d.mesh() == mesh, who, ": the input DTensor lives on ", d.mesh().ToString(),
                 ", not on the tensor-parallel mesh ", mesh.ToString());
    const Placement target = desired.has_value() ? Normalize(*desired, x.dim(), who) : want;
    if (d.placements()[0] != target) d = d.Redistribute(mesh, {target});
    return d;
  } else {
    dtensor::FromLocalOptions opts;
    opts.shape = shape;
    try {
      d = dtensor::DTensor::FromLocal(x, mesh, {want}, opts);
    } catch (const Error& e) {  // the DTensor's message alone named neither the module nor the style
      TESSEL_FAIL(e.code(), who, ": its input, a plain tensor of shape ", ShapeStr(x.sizes()), ", is taken as this ",
                  "rank's ", dtensor::ToString(want), " piece (input_layouts); pass each rank's piece, or declare the ",
                  "layout it has (input_layouts=Replicate() for the whole input): ", e.what());
    }
  }
  if (!desired.has_value()) return d;
  const Placement target = Normalize(*desired, x.dim(), who);
  if (target == want) return d;
  return d.Redistribute(mesh, {target});
}

Tensor PrepareOutput(const Tensor& y, const std::optional<Placement>& layout, const Placement& desired, bool use_local,
                     const DeviceMesh& mesh, const std::string& who) {
  TESSEL_CHECK(y.defined(), who, ": got an undefined output");
  dtensor::DTensor d;
  if (layout.has_value()) {
    d = PrepareInput(y, *layout, std::nullopt, mesh, who);
  } else {
    TESSEL_CHECK(y.is_distributed(), who, ": expected a DTensor output, got a plain tensor of shape ",
                 ShapeStr(y.sizes()));
    d = dtensor::DTensor(y);
  }
  const Placement target = Normalize(desired, y.dim(), who);
  if (d.placements()[0] != target) d = d.Redistribute(mesh, {target});
  return use_local ? d.ToLocal() : d.tensor();
}

std::string Who(const std::string& style, const std::string& fqn, const nn::Module& module) {
  return Str(style, " on '", fqn, "' (", module.type_name(), ")");
}

}  // namespace internal

std::string StyleName(const ParallelStyle& style) {
  static constexpr const char* kNames[] = {"ColwiseParallel",    "RowwiseParallel",     "SequenceParallel",
                                           "PrepareModuleInput", "PrepareModuleOutput", "PrepareModuleInputOutput"};
  return kNames[style.index()];
}

namespace {

std::string LayoutsToString(const Layouts& layouts) {
  std::string s = "(";
  for (size_t i = 0; i < layouts.size(); ++i) {
    s += (i ? ", " : "") + (layouts[i] ? dtensor::ToString(*layouts[i]) : std::string("None"));
  }
  return s + ")";
}

const char* Bool(bool b) { return b ? "true" : "false"; }

}  // namespace

std::string ToString(const ParallelStyle& style) {
  const std::string name = StyleName(style);
  if (const auto* c = std::get_if<ColwiseParallel>(&style)) {
    return Str(name, "(input_layouts=", dtensor::ToString(c->input_layouts),
               ", output_layouts=", dtensor::ToString(c->output_layouts),
               ", use_local_output=", Bool(c->use_local_output), ")");
  }
  if (const auto* r = std::get_if<RowwiseParallel>(&style)) {
    return Str(name, "(input_layouts=", dtensor::ToString(r->input_layouts),
               ", output_layouts=", dtensor::ToString(r->output_layouts),
               ", use_local_output=", Bool(r->use_local_output), ")");
  }
  if (const auto* s = std::get_if<SequenceParallel>(&style)) {
    return Str(name, "(sequence_dim=", s->sequence_dim, ", use_local_output=", Bool(s->use_local_output), ")");
  }
  if (const auto* i = std::get_if<PrepareModuleInput>(&style)) {
    return Str(name, "(input_layouts=", LayoutsToString(i->input_layouts),
               ", desired_input_layouts=", LayoutsToString(i->desired_input_layouts),
               ", use_local_output=", Bool(i->use_local_output), ")");
  }
  if (const auto* o = std::get_if<PrepareModuleOutput>(&style)) {
    return Str(name, "(output_layouts=", LayoutsToString(o->output_layouts),
               ", desired_output_layouts=", LayoutsToString(o->desired_output_layouts),
               ", use_local_output=", Bool(o->use_local_output), ")");
  }
  const auto& io = std::get<PrepareModuleInputOutput>(style);
  return Str(name, "(input_layouts=", LayoutsToString(io.input_layouts),
             ", desired_input_layouts=", LayoutsToString(io.desired_input_layouts),
             ", use_local_input=", Bool(io.use_local_input), ", output_layouts=", LayoutsToString(io.output_layouts),
             ", desired_output_layouts=", LayoutsToString(io.desired_output_layouts),
             ", use_local_output=", Bool(io.use_local_output), ")");
}

}  // namespace tessel::tp
