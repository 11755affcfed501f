// bindings/tensor_py.cc — tessel.Tensor's core (shape, dtype, autograd state, numpy round trips), the
// dtype objects (tessel.float32, ...), creation functions, the RNG Generator and the grad-mode switch.
//
// Invariant: numpy data enters by copy into a new dense tensor and leaves by copy (a DTensor is gathered,
// a collective); an array numpy cannot lay out (too large, unsupported dtype) raises the Python exception
// (MemoryError, TypeError) before tessel allocates anything, never a crash.
//
// Example (Python):
//   t = tessel._C._from_numpy(np.ones((2, 3), np.float32)); t.shape == (2, 3); t.numpy()
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <vector>

#include "bindings/bind.h"
#include "core/base/error.h"
#include "core/autograd/anomaly.h"
#include "core/autograd/autocast.h"
#include "core/autograd/call.h"
#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/node.h"
#include "core/autograd/saved_tensor_hooks.h"
#include "core/dispatch/profiler.h"
#include "core/ops/vector_isa.h"
#include "core/ops/elementwise.h"
#include "core/ops/view.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "core/tensor/torch_random.h"
#include "core/tensor/tensor_impl.h"
#include "dtensor/dtensor.h"

namespace tessel::bindings {
namespace {

DType FromNumpy(const py::dtype& dt) {
  // By kind and size, not identity: an unpickled or np.load'ed array's dtype is an equal but distinct
  // object. Byte order must be native ('=' or '|'; '<' is native here: x86-64 is little-endian).
  const char order = dt.byteorder();
  if (order == '=' || order == '|' || order == '<') {
    const char kind = dt.kind();
    const py::ssize_t size = dt.itemsize();
    if (kind == 'f' && size == 4) return DType::kFloat32;
    if (kind == 'f' && size == 8) return DType::kFloat64;
    if (kind == 'f' && size == 2) return DType::kFloat16;
    if (kind == 'i' && size == 8) return DType::kInt64;
    if (kind == 'i' && size == 4) return DType::kInt32;
    if (kind == 'i' && size == 2) return DType::kInt16;
    if (kind == 'i' && size == 1) return DType::kInt8;
    if (kind == 'u' && size == 1) return DType::kUInt8;
    if (kind == 'b' && size == 1) return DType::kBool;
  }
  throw py::type_error("tessel.tensor: unsupported numpy dtype " + py::str(static_cast<const py::handle&>(dt)).cast<std::string>() +
                       " (float32, float64, float16, int64, int32, int16, int8, uint8, bool)");
}

py::dtype ToNumpy(DType d) {
  switch (d) {
    case DType::kFloat32: return py::dtype::of<float>();
    case DType::kFloat64: return py::dtype::of<double>();
    case DType::kInt64: return py::dtype::of<int64_t>();
    case DType::kInt32: return py::dtype::of<int32_t>();
    case DType::kFloat16: return py::dtype("float16");
    case DType::kBool: return py::dtype::of<bool>();
    case DType::kUInt8: return py::dtype::of<uint8_t>();
    case DType::kInt8: return py::dtype::of<int8_t>();
    case DType::kInt16: return py::dtype::of<int16_t>();
    default: break;
  }
  throw py::type_error("Tensor.numpy: no numpy dtype for " + std::string(DTypeName(d)) + " (cast it with .float() first)");
}

}  // namespace

// A copy of a numpy array as a dense tensor. The dtype is checked first; numpy makes the C-contiguous
// copy (np.ascontiguousarray raises MemoryError for an array it cannot allocate, e.g. a broadcast view
// of 10**12 elements), so tessel only ever copies a buffer that exists.
Tensor FromArray(const py::array& in) {
  const DType dtype = FromNumpy(in.dtype());
  const py::array a = py::module_::import("numpy").attr("ascontiguousarray")(in);
  // The input's shape: ascontiguousarray returns at least 1-D, which made tessel.tensor(1.0) shape [1]
  // instead of torch's [] (and changed the shapes of everything broadcast against it).
  const Shape shape(in.shape(), in.shape() + in.ndim());
  const void* src = a.data();
  const size_t nbytes = static_cast<size_t>(a.nbytes());
  return NoGil([&] {
    Tensor t = Empty(shape, dtype);
    if (nbytes > 0) std::memcpy(t.raw_data(), src, nbytes);
    return t;
  });
}

namespace {
PyObject* dtype_objects[kNumDTypes] = {};

// Element `p` of a dense CPU tensor of `dtype` as the Python number torch's item() / tolist() give: float for the
// floating dtypes (the 16-bit ones widened exactly), int for the integers, bool for bool. A new reference.
PyObject* PyNumberAt(const char* p, DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return PyFloat_FromDouble(*reinterpret_cast<const float*>(p));
    case DType::kFloat64: return PyFloat_FromDouble(*reinterpret_cast<const double*>(p));
    case DType::kBFloat16: return PyFloat_FromDouble(ToCompute(*reinterpret_cast<const BFloat16*>(p)));
    case DType::kFloat16: return PyFloat_FromDouble(ToCompute(*reinterpret_cast<const Float16*>(p)));
    case DType::kInt64: return PyLong_FromLongLong(*reinterpret_cast<const int64_t*>(p));
    case DType::kInt32: return PyLong_FromLong(*reinterpret_cast<const int32_t*>(p));
    case DType::kInt16: return PyLong_FromLong(*reinterpret_cast<const int16_t*>(p));
    case DType::kInt8: return PyLong_FromLong(*reinterpret_cast<const int8_t*>(p));
    case DType::kUInt8: return PyLong_FromLong(*reinterpret_cast<const uint8_t*>(p));
    case DType::kBool: return PyBool_FromLong(*reinterpret_cast<const bool*>(p));
  }
  return nullptr;
}

// Nested lists of dims [d, ndim) of a dense CPU tensor from `p` (its element at index 0 along those dims).
PyObject* PyListAt(const Tensor& t, int64_t d, const char* p, int64_t item) {
  if (d == t.dim()) return PyNumberAt(p, t.dtype());
  const int64_t n = t.size(d), step = t.numel() == 0 ? 0 : t.stride(d) * item;  // (no offsets from nothing)
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(n));
  if (list == nullptr) return nullptr;
  for (int64_t i = 0; i < n; ++i) {
    PyObject* v = PyListAt(t, d + 1, p + i * step, item);
    if (v == nullptr) {
      Py_DECREF(list);
      return nullptr;
    }
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), v);
  }
  return list;
}

// A Python callable that takes a registered hook out, once (Tensor.register_hook's handle: tessel/_compat.py).
py::object HookRemoverObject(HookRemover remove) {
  auto held = std::make_shared<HookRemover>(std::move(remove));
  return py::cpp_function([held] {
    if (!*held) return;
    const HookRemover once = std::move(*held);
    *held = nullptr;
    once();  // (with the GIL: dropping a Python hook's callable needs it)
  });
}

// A plain CPU tensor whose values can be read in place (not a DTensor; bytes not freed by fully_shard, not built
// under deferred init): item() and tolist() read it directly, without a copy or a GIL release.
bool ReadableInPlace(const Tensor& t) {
  if (!t.defined() || t.is_distributed() || !t.device().is_cpu()) return false;
  const Storage& s = t.impl()->storage();
  return s.defined() && !s.deferred_init() && (t.numel() == 0 || s.nbytes() > 0);
}
}  // namespace

py::tuple GradsForPython(const TensorList& grads) {
  py::tuple out(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) out[i] = grads[i].defined() ? py::cast(grads[i]) : py::none();
  return out;
}

PyObject* DTypeObject(DType dtype) {
  const int i = static_cast<int>(dtype);
  return i >= 0 && i < kNumDTypes ? dtype_objects[i] : nullptr;
}

namespace {

// Tensor.numpy(), as torch's: a host tensor's array shares its memory (same strides; the array keeps the
// tensor alive, so writes through either are seen by the other). A DTensor's is a gathered copy of the full
// value (collective), a device tensor's a copy on the host.
py::array ToArray(const Tensor& t) {
  TESSEL_CHECK(t.defined(), "Tensor.numpy: undefined tensor");
  const py::dtype dt = ToNumpy(t.dtype());
  Tensor src = t;
  if (t.is_distributed() || !t.device().is_cpu()) {
    src = NoGil([&] { return Contiguous(t.impl()->MaterializeFull(t)).To(Device::Cpu(0)); });
  }
  const int64_t item = ElementSize(src.dtype());
  std::vector<py::ssize_t> shape, strides;
  for (int64_t d = 0; d < src.dim(); ++d) {
    shape.push_back(src.size(d));
    strides.push_back(src.stride(d) * item);
  }
  TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, src.numel() == 0 || src.impl()->storage().data() != nullptr,
                    "Tensor.numpy: the tensor of shape ", ShapeStr(src.sizes()), " has no bytes (fully_shard ",
                    "freed them when it resharded)");
  void* data = src.numel() > 0 ? src.raw_data() : nullptr;
  // The array keeps the bytes themselves alive, not the tensor: `x.set_(y)` or `x.data = y` gives x other bytes,
  // and an array whose base was x then pointed into freed memory that the next tensor reused.
  auto* bytes = new Storage(src.impl()->storage());
  return py::array(dt, shape, strides, data, py::capsule(bytes, [](void* p) { delete static_cast<Storage*>(p); }));
}

std::string Repr(const Tensor& t) {
  if (!t.defined()) return "tessel.Tensor(undefined)";
  return Str("tessel.Tensor(", ShapeStr(t.sizes()), ", ", DTypeName(t.dtype()), t.is_distributed() ? ", DTensor" : "",
             t.requires_grad() ? ", requires_grad" : "", ")");
}

void BindDTypes(py::module_& m) {
  py::enum_<DType> e(m, "dtype");
  e
      .value("float32", DType::kFloat32)
      .value("float64", DType::kFloat64)
      .value("bfloat16", DType::kBFloat16)
      .value("float16", DType::kFloat16)
      .value("int64", DType::kInt64)
      .value("int32", DType::kInt32)
      .value("bool", DType::kBool)
      .value("uint8", DType::kUInt8)
      .value("int8", DType::kInt8)
      .value("int16", DType::kInt16)
      .def_property_readonly("is_floating_point", &IsFloating)
      .def_property_readonly("is_signed", [](DType d) { return d != DType::kUInt8 && d != DType::kBool; })
      .def_property_readonly("is_complex", [](DType) { return false; })  // complex dtypes: tessel/_complex.py
      .def_property_readonly("itemsize", &ElementSize);
  // Replaced, not overloaded (.def would add a sibling overload that enum_'s own repr shadows).
  auto name = py::cpp_function([](DType d) { return "tessel." + std::string(DTypeName(d)); }, py::is_method(e));
  e.attr("__repr__") = name;
  e.attr("__str__") = name;
  // Pickled (and deep-copied) by name, so unpickling gives the same object back, as torch's dtypes do.
  // (A string from __reduce__ names a global: tessel._C.dtype.<name>, looked up again when loading.)
  e.attr("__reduce__") =
      py::cpp_function([](DType d) { return "dtype." + std::string(DTypeName(d)); }, py::is_method(e));
  // The enum's value objects become the dtypes' only Python objects (bind.h's caster; never released).
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType d = static_cast<DType>(i);
    dtype_objects[i] = py::object(e.attr(std::string(DTypeName(d)).c_str())).release().ptr();
  }
}

void BindGenerator(py::module_& m) {
  // torch's seed of a new CPU Generator (c10's default_rng_seed_val): Generator().initial_seed() as torch's, and
  // its host stream (random.h) gives torch's draws for a generator never seeded
  constexpr uint64_t kTorchDefaultSeed = 67280421310721ULL;
  py::class_<Generator>(m, "Generator", "Counter-based (Philox) RNG state: a seed and an offset")
      .def(py::init<uint64_t, uint64_t>(), py::arg("seed") = kTorchDefaultSeed, py::arg("offset") = 0)
      // torch's Generator(device="cpu") / Generator("cpu"): the CPU is tessel's device here
      .def(py::init([](const py::object& device) {
        const std::string name = py::str(device);
        TESSEL_CHECK(name == "cpu", "Generator: device '", name, "' is not available (tessel runs on the CPU)");
        return Generator(kTorchDefaultSeed);
      }), py::arg("device"))
      .def_property_readonly("device", [](const Generator&) {
        return py::module_::import("tessel").attr("device")("cpu");
      })
      .def("manual_seed", [](Generator& g, uint64_t seed) -> Generator& {
        g = Generator(seed);
        return g;
      }, py::arg("seed"), py::return_value_policy::reference)
      .def("initial_seed", &Generator::seed)
      .def_property("offset", &Generator::offset, &Generator::set_offset)
      .def_property("host_draws", &Generator::host_draws, &Generator::set_host_draws)
      .def_property("next_normal", &Generator::next_normal, &Generator::set_next_normal,
                    "the cached second value of a one-at-a-time normal draw (torch_random.h), or None");
}

Tensor TorchDraw(const std::vector<int64_t>& shape, Generator& gen, DType dtype, Distribution dist) {
  Tensor out = Empty(shape, dtype);
  if (DeferredInitEnabled() || !out.device().is_cpu()) return Random(shape, gen, dist, dtype);
  if (dist.kind == Distribution::Kind::kUniform) {
    TorchUniform(out, gen, dist.a, dist.b);
  } else {
    TorchNormal(out, gen, dist.a, dist.b);
  }
  ResetVersionIfUnshared(out);  // torch's factories return version 0
  return out;
}

void BindCreation(py::module_& m) {
  m.def("_empty", [](std::vector<int64_t> shape, DType dtype) { return NoGil([&] { return Empty(shape, dtype); }); });
  m.def("_full", [](std::vector<int64_t> shape, double value, DType dtype) {
    return NoGil([&] { return Full(shape, value, dtype); });
  });
  m.def("_arange", [](double start, double end, double step, DType dtype) {
    return NoGil([&] { return Arange(start, end, step, dtype); });
  });
  // torch.rand / randn: on the CPU torch's own kernels on the host stream (torch_random.h), so a seeded script
  // draws torch's values; on a device, or under deferred init, the counter-based draw (random.h).
  m.def("_rand", [](std::vector<int64_t> shape, Generator* gen, DType dtype) {
    return NoGil([&] { return TorchDraw(shape, GenOrDefault(gen), dtype, Distribution::Uniform()); });
  });
  m.def("_randn", [](std::vector<int64_t> shape, Generator* gen, DType dtype) {
    return NoGil([&] { return TorchDraw(shape, GenOrDefault(gen), dtype, Distribution::Normal()); });
  });
  // Tensor.log_normal_ / cauchy_ / geometric_ / bernoulli_(p) on a dense CPU tensor, as torch's CPU kernels
  // (torch_random.h); a: mean / median / p, b: std / sigma.
  m.def("_torch_random_", [](const Tensor& t, const std::string& kind, double a, double b, Generator* gen) {
    NoGil([&] {
      Generator& g = GenOrDefault(gen);
      if (kind == "log_normal") {
        TorchLogNormal(t, g, a, b);
      } else if (kind == "cauchy") {
        TorchCauchy(t, g, a, b);
      } else if (kind == "geometric") {
        TorchGeometric(t, g, a);
      } else {
        TESSEL_CHECK(kind == "bernoulli", "_torch_random_: ", kind,
                     " is not log_normal, cauchy, geometric or bernoulli");
        TorchBernoulli(t, g, a);
      }
    });
    return t;
  }, py::arg("tensor"), py::arg("kind"), py::arg("a"), py::arg("b"), py::arg("generator"));
  m.def("_torch_bernoulli_", [](const Tensor& t, const Tensor& p, Generator* gen) {
    NoGil([&] { TorchBernoulli(t, GenOrDefault(gen), p); });
    return t;
  }, py::arg("tensor"), py::arg("p"), py::arg("generator"),
        "t filled with bernoulli(p) as torch's CPU kernel (p: probabilities of t's shape)");
  m.def("_torch_sample_", [](const Tensor& out, const std::string& kind, const Tensor& a,
                             const std::optional<Tensor>& b, Generator* gen) {
    const TorchSampler sampler = kind == "standard_gamma" ? TorchSampler::kStandardGamma
                                 : kind == "poisson"      ? TorchSampler::kPoisson
                                                          : TorchSampler::kBinomial;
    TESSEL_CHECK(sampler != TorchSampler::kBinomial || (kind == "binomial" && b), "_torch_sample_: ", kind,
                 " is not standard_gamma, poisson or binomial (with probabilities)");
    NoGil([&] { TorchSample(out, GenOrDefault(gen), sampler, a, b.value_or(a)); });
    return out;
  }, py::arg("out"), py::arg("kind"), py::arg("a"), py::arg("b"), py::arg("generator"),
        "out filled by torch's CPU sampler for `kind` from parameters a (and b) of out's shape and dtype");
  m.def("_force_torch_cpu_kernels", [](const std::string& name) {
    TESSEL_CHECK(name == "auto" || name == "default" || name == "avx2", "_force_torch_cpu_kernels: ", name,
                 " is not auto, default or avx2");
    ForceTorchCpuKernelsForTesting(name == "auto" ? TorchCpuKernels::kAuto
                                   : name == "default" ? TorchCpuKernels::kDefault : TorchCpuKernels::kAvx2);
  }, "Test-only: which of torch's CPU distribution kernels the draws follow (torch_random.h)");
  m.def("_randint", [](int64_t low, int64_t high, std::vector<int64_t> shape, Generator* gen, DType dtype) {
    return NoGil([&] { return Randint(low, high, shape, GenOrDefault(gen), dtype); });
  });
  m.def("_from_numpy", &FromArray, py::arg("array"), "A tessel Tensor holding a copy of a numpy array");
  // torch's randperm on the CPU (aten's randperm_cpu), from the generator's host stream (random.h): a Fisher-Yates
  // pass where position i swaps with i + word mod (n - i), one 32-bit word per position below n - 1 (two, high
  // word first, from n = 2^32 / 20 on). tessel.randperm, random_split and the samplers; a Python loop took 0.4 s
  // at 1M.
  m.def("_host_randperm", [](int64_t n, Generator* gen) {
    TESSEL_CHECK(n >= 0, "randperm: n must be non-negative, got ", n);
    Generator& g = GenOrDefault(gen);
    const bool wide = n >= static_cast<int64_t>((uint64_t{1} << 32) / 20);
    std::vector<uint32_t> words(static_cast<size_t>(std::max<int64_t>(n - 1, 0)) * (wide ? 2 : 1));
    g.HostDraw(words);
    py::array_t<int64_t> out(n);
    int64_t* r = out.mutable_data();
    for (int64_t i = 0; i < n; ++i) r[i] = i;
    for (int64_t i = 0; i + 1 < n; ++i) {
      const uint64_t word = wide ? (uint64_t{words[2 * i]} << 32 | words[2 * i + 1]) : words[i];
      std::swap(r[i], r[i + static_cast<int64_t>(word % static_cast<uint64_t>(n - i))]);
    }
    return out;
  }, py::arg("n"), py::arg("generator") = nullptr);
  // k 32-bit words of the generator's host stream (random.h), for the samplers' seeds and randint draws.
  m.def("_host_words", [](int64_t k, Generator* gen) {
    TESSEL_CHECK(k >= 0, "_host_words: k must be non-negative, got ", k);
    py::array_t<uint32_t> out(k);
    GenOrDefault(gen).HostDraw(std::span<uint32_t>(out.mutable_data(), static_cast<size_t>(k)));
    return out;
  }, py::arg("k"), py::arg("generator") = nullptr);
  // `with tessel.no_grad():` holds one of these: the thread's grad mode (each rank thread has its own)
  // is set on __enter__ and restored on __exit__.
  struct PyGradMode {
    bool enabled;
    std::unique_ptr<GradModeGuard> guard;
  };
  py::class_<PyGradMode>(m, "_GradMode")
      .def(py::init([](bool enabled) { return PyGradMode{enabled, nullptr}; }), py::arg("enabled"))
      .def("__enter__", [](PyGradMode& g) {
        TESSEL_CHECK(g.guard == nullptr, "grad mode context entered twice");
        g.guard = std::make_unique<GradModeGuard>(g.enabled);
      })
      .def("__exit__", [](PyGradMode& g, py::args) {
        TESSEL_CHECK(g.guard != nullptr, "grad mode context: __exit__ without __enter__");
        g.guard.reset();
      });
  // torch.autograd.graph.saved_tensors_hooks (tessel/autograd.py): while entered on this thread, every tensor a
  // recorded op saves goes through pack_hook (any Python object back), and backward sees unpack_hook(that
  // object) instead (core/autograd/saved_tensor_hooks.h). Both run with the GIL taken: ops record with it released.
  struct PySavedTensorsHooks {
    std::shared_ptr<py::object> pack, unpack;
    std::unique_ptr<autograd::SavedTensorHooksGuard> guard;
  };
  py::class_<PySavedTensorsHooks>(m, "_SavedTensorsHooks")
      .def(py::init([](py::object pack, py::object unpack) {
             return PySavedTensorsHooks{ShareCallable(std::move(pack)), ShareCallable(std::move(unpack)), nullptr};
           }),
           py::arg("pack_hook"), py::arg("unpack_hook"))
      .def("__enter__", [](PySavedTensorsHooks& h) {
        TESSEL_CHECK(h.guard == nullptr, "saved_tensors_hooks: context entered twice");
        auto pack = h.pack, unpack = h.unpack;
        h.guard = std::make_unique<autograd::SavedTensorHooksGuard>(
            [pack, unpack](const Tensor& saved) -> autograd::UnpackFn {
              py::gil_scoped_acquire gil;
              auto packed = ShareCallable((*pack)(saved));  // any Python object, dropped with the GIL held
              const Shape shape = saved.sizes();
              return [unpack, packed, shape]() -> Tensor {
                py::gil_scoped_acquire gil;
                py::object r = (*unpack)(*packed);
                TESSEL_CHECK(py::isinstance<Tensor>(r), "saved_tensors_hooks: unpack_hook returned ",
                             py::str(py::type::of(r).attr("__name__")).cast<std::string>(), ", not a Tensor");
                Tensor t = r.cast<Tensor>();
                TESSEL_CHECK(t.sizes() == shape, "saved_tensors_hooks: unpack_hook returned a tensor of shape ",
                             ShapeStr(t.sizes()), " for one saved with shape ", ShapeStr(shape));
                return t;
              };
            });
      })
      .def("__exit__", [](PySavedTensorsHooks& h, py::args) {
        TESSEL_CHECK(h.guard != nullptr, "saved_tensors_hooks: __exit__ without __enter__");
        h.guard.reset();
      });
  // torch.autograd.Function (tessel/autograd.py runs forward and validates backward's results): the
  // computed outputs recorded as one node over the inputs; backward gets one gradient per output (None
  // for an undefined one) and returns one per input (None for none).
  m.def("_apply_function", [](std::string name, const TensorList& inputs, const TensorList& outputs,
                              std::vector<bool> differentiable, py::object backward, bool materialize_grads,
                              py::object release) {
    auto fn = ShareCallable(std::move(backward));
    std::function<void()> on_release;
    if (!release.is_none()) {
      auto rel = ShareCallable(std::move(release));
      on_release = [rel] {
        py::gil_scoped_acquire gil;
        (*rel)();
      };
    }
    return autograd::ApplyCustomFunction(
        std::move(name), inputs, outputs, differentiable,
        [fn](const TensorList& grads) {
          py::gil_scoped_acquire gil;
          py::list in;
          for (const Tensor& g : grads) in.append(g.defined() ? py::cast(g) : py::none());
          py::object r = (*fn)(in);
          TensorList out;
          for (const py::handle& g : r) out.push_back(g.is_none() ? Tensor() : g.cast<Tensor>());
          return out;
        },
        materialize_grads, std::move(on_release));
  }, py::arg("name"), py::arg("inputs"), py::arg("outputs"), py::arg("differentiable"), py::arg("backward"),
        py::arg("materialize_grads"), py::arg("release") = py::none());
  m.def("_reattach_function_output", &autograd::ReattachFunctionOutput, py::arg("saved"), py::arg("index"),
        "Inside a custom Function's backward: a saved output with the running Function's node as its grad_fn");
  // torch.autocast (tessel/amp.py keeps the previous state and restores it on exit): this thread's
  // region flag and dtype (core/autograd/autocast.h).
  // tessel.profiler.profile: an OpProfiler on this thread between start() and stop() (core/dispatch/
  // profiler.h); rows() maps each op to (calls, seconds). Profilers nest LIFO, as the C++ class.
  struct PyProfiler {
    std::unique_ptr<OpProfiler> active;
    std::map<std::string, OpProfiler::Row> rows;
    std::vector<OpProfiler::Event> events;
  };
  // start(by_shape=True) (torch's record_shapes): rows keyed "op [2, 3] float32, [3] float32" (profiler.h).
  py::class_<PyProfiler>(m, "_OpProfiler")
      .def(py::init<>())
      .def("start", [](PyProfiler& p, bool by_shape, bool record_events) {
        TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, !p.active, "profiler: already started");
        p.active = std::make_unique<OpProfiler>(std::function<void()>(), by_shape, record_events);
      }, py::arg("by_shape") = false, py::arg("record_events") = false)
      .def("stop", [](PyProfiler& p) {
        TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, p.active && OpProfiler::Current() == p.active.get(),
                          "profiler: stop() must close the innermost running profiler on the thread that started it");
        p.rows = p.active->rows();
        p.events = p.active->events();
        p.active.reset();
      })
      // [(key, start_ns, duration_ns)] of every kernel call, in call order (record_events=True).
      .def("events", [](const PyProfiler& p) {
        py::list out;
        for (const auto& e : p.active ? p.active->events() : p.events) {
          out.append(py::make_tuple(py::str(e.op), e.start_ns, e.duration_ns));
        }
        return out;
      })
      .def("rows", [](const PyProfiler& p) {
        py::dict out;
        for (const auto& [op, r] : p.active ? p.active->rows() : p.rows) out[py::str(op)] = py::make_tuple(r.calls, r.seconds);
        return out;
      });
  // torch.backends.cpu.get_cpu_capability(): the vector ISA tessel's own kernels run (core/ops/vector_isa.h),
  // named as torch names its dispatch levels.
  m.def("_cpu_capability", [] { return ActiveVectorIsa() == VectorIsa::kAvx512 ? "AVX512" : "AVX2"; });
  m.def("_autocast_state", [] { return py::make_tuple(AutocastEnabled(), AutocastDType()); });
  m.def("_set_autocast", [](bool enabled, DType dtype) {
    TESSEL_CHECK(dtype == DType::kBFloat16 || dtype == DType::kFloat16 || !enabled,
                 "autocast: the lower-precision dtype must be bfloat16 or float16, got ", DTypeName(dtype));
    SetAutocastState(enabled, dtype);
  }, py::arg("enabled"), py::arg("dtype"));
  // torch.autograd.grad's core (tessel/autograd.py adds torch's argument handling): undefined results
  // come back as None.
  m.def("_grad", [](const TensorList& outputs, const TensorList& inputs, const std::vector<std::optional<Tensor>>& seeds,
                    bool retain_graph, bool allow_unused, bool create_graph) {
    TensorList grads;
    for (const auto& g : seeds) grads.push_back(g ? *g : Tensor());
    const TensorList r =
        NoGil([&] { return Grad(outputs, inputs, grads, retain_graph, allow_unused, create_graph); });
    std::vector<std::optional<Tensor>> out;
    for (const Tensor& t : r) out.push_back(t.defined() ? std::optional<Tensor>(t) : std::nullopt);
    return out;
  }, py::arg("outputs"), py::arg("inputs"), py::arg("grad_outputs"), py::arg("retain_graph"), py::arg("allow_unused"),
        py::arg("create_graph") = false);
  m.def("_backward", [](const TensorList& roots, const std::vector<std::optional<Tensor>>& seeds, bool retain_graph,
                        bool create_graph, const TensorList& inputs) {
    TensorList grads;
    for (const auto& g : seeds) grads.push_back(g ? *g : Tensor());
    NoGil([&] { Backward(roots, grads, retain_graph, create_graph, inputs); });
  }, py::arg("tensors"), py::arg("grad_tensors"), py::arg("retain_graph"), py::arg("create_graph") = false,
     py::arg("inputs") = TensorList());
  // torch.autograd.graph.queue_callback: fn() once the current backward pass has run every node (held and
  // dropped with the GIL); outside a backward, torch's error.
  m.def("_queue_callback", [](py::object fn) {
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, InBackward(),
                      "Final callbacks can only be installed during backward pass.");
    auto f = ShareCallable(std::move(fn));
    QueueCallback([f] {
      py::gil_scoped_acquire gil;
      (*f)();
    });
  }, py::arg("callback"));
  // The backward pass running on this thread (0 outside one): torch's _current_graph_task_id, to tell passes apart.
  m.def("_backward_pass_id", [] { return BackwardPassId(); });
  m.def("is_grad_enabled", &GradModeEnabled);
  m.def("_set_grad_enabled", &SetGradModeEnabled, py::arg("enabled"));
  // torch's anomaly mode (core/autograd/anomaly.h): tessel.autograd.detect_anomaly / set_detect_anomaly. Nodes
  // made while it is on record the interpreter's stack, and a failing backward warns with it as torch's
  // "Error detected in ... Traceback of forward call that caused the error".
  m.def("_set_anomaly_enabled", [](bool enabled, bool check_nan) {
    autograd::SetForwardTraceHooks(
        [] {
          if (!Py_IsInitialized()) return std::string();
          py::gil_scoped_acquire gil;
          try {
            return py::str(py::str("").attr("join")(py::module_::import("traceback").attr("format_stack")()))
                .cast<std::string>();
          } catch (const py::error_already_set&) {
            return std::string();
          }
        },
        [](const std::string& node, const std::string& trace) {
          if (!Py_IsInitialized()) return;
          py::gil_scoped_acquire gil;
          const std::string text =
              Str("Error detected in ", node, ". Traceback of forward call that caused the error:\n", trace);
          if (PyErr_WarnEx(PyExc_UserWarning, text.c_str(), 1) != 0) PyErr_Clear();
        });
    autograd::SetAnomalyMode(enabled, check_nan);
  }, py::arg("enabled"), py::arg("check_nan") = true);
  m.def("_is_anomaly_enabled", &autograd::AnomalyModeEnabled);
  m.def("_is_anomaly_check_nan_enabled", &autograd::AnomalyCheckNan);
}

// What a Python node hook returned: None keeps the gradients; else a sequence of tensors or None (torch's).
std::optional<TensorList> NodeHookResult(const py::object& r) {
  if (r.is_none()) return std::nullopt;
  if (!py::isinstance<py::sequence>(r) || py::isinstance<py::str>(r) || py::isinstance<Tensor>(r)) {
    throw py::type_error(Str("expected tuple, but hook returned '",
                             py::type::of(r).attr("__name__").cast<std::string>(), "'"));
  }
  TensorList out;
  for (py::handle x : r.cast<py::sequence>()) {
    if (!x.is_none() && !py::isinstance<Tensor>(x)) {
      throw py::type_error(Str("expected Tensor or None in the tuple a node hook returned, but got '",
                               py::type::of(x).attr("__name__").cast<std::string>(), "'"));
    }
    out.push_back(x.is_none() ? Tensor() : x.cast<Tensor>());
  }
  return out;
}

// Tensor.grad_fn: the autograd node that made a tensor (None for leaves and tensors without history), with
// torch's name(), next_functions ((node or None, input slot) per input) and, on AccumulateGrad, variable.
void BindAutogradNode(py::module_& m) {
  using autograd::Node;
  py::class_<Node, std::shared_ptr<Node>>(m, "_Node", "A node of the autograd graph (torch's grad_fn)")
      .def("name", [](const Node& n) { return autograd::TorchNodeName(n.name()); })
      .def_property_readonly("next_functions", [](const Node& n) {
        py::list out;
        for (const autograd::Edge& e : n.next_edges) {
          out.append(py::make_tuple(e.node ? py::cast(e.node) : py::none(), e.input_nr));
        }
        return py::tuple(out);
      })
      .def_property_readonly("variable", [](const Node& n) -> Tensor {
        if (const auto* acc = dynamic_cast<const autograd::AccumulateGrad*>(&n)) return acc->leaf();
        throw py::attribute_error("'" + autograd::TorchNodeName(n.name()) + "' object has no attribute 'variable'");
      })
      .def("__repr__", [](const Node& n) {
        return Str("<", autograd::TorchNodeName(n.name()), " object at ", static_cast<const void*>(&n), ">");
      })
      .def("__eq__", [](const Node& a, py::object b) {
        return py::isinstance<Node>(b) && &a == &b.cast<const Node&>();
      })
      .def("__hash__", [](const Node& n) { return std::hash<const void*>()(&n); })
      // torch's Node.register_prehook (pre: fn(grad_outputs)) and register_hook (fn(grad_inputs, grad_outputs)):
      // each returns replacements or None; Python wraps the remover in a handle (tessel/_compat.py).
      .def("_register_hook", [](Node& n, py::object fn, bool pre) {
        auto f = ShareCallable(std::move(fn));  // dropped with the GIL
        const std::weak_ptr<Node> weak = n.shared_from_this();
        const uint64_t id = pre ? n.pre_hooks.Add([f](const TensorList& g) {
          py::gil_scoped_acquire gil;
          return NodeHookResult((*f)(GradsForPython(g)));
        }) : n.post_hooks.Add([f](const TensorList& grad_inputs, const TensorList& grad_outputs) {
          py::gil_scoped_acquire gil;
          return NodeHookResult((*f)(GradsForPython(grad_inputs), GradsForPython(grad_outputs)));
        });
        return HookRemoverObject([weak, id, pre] {
          if (const std::shared_ptr<Node> node = weak.lock()) {
            pre ? node->pre_hooks.Remove(id) : node->post_hooks.Remove(id);
          }
        });
      }, py::arg("fn"), py::arg("pre"));
}

}  // namespace

Generator& DefaultGenerator() {
  static thread_local Generator gen(0);
  return gen;
}

namespace {
std::atomic<DType> default_float_dtype{DType::kFloat32};

// The tensor whose storage a Python handle's data lives in: itself, or a DTensor's local shard.
Tensor LocalPiece(const Tensor& t) { return t.is_distributed() ? dtensor::DTensor(t).ToLocal() : t; }

// tessel.Size (torch.Size: a tuple subclass with numel()), registered by _tensor.py at import; a plain
// tuple until then. Owned by the interpreter for the process's life (never decref'd at exit).
PyObject* size_type = nullptr;

py::object SizeObject(const Shape& sizes) {
  py::tuple t = py::cast(sizes);
  if (size_type == nullptr) return std::move(t);
  return py::reinterpret_borrow<py::object>(size_type)(t);
}
}  // namespace

DType DefaultFloatDType() { return default_float_dtype.load(std::memory_order_relaxed); }

void SetDefaultFloatDType(DType dtype) {
  TESSEL_CHECK_CODE(ErrorCode::kInvalidArgument, IsFloating(dtype),
                    "only floating-point types are supported as the default type, got ", dtype);
  default_float_dtype.store(dtype, std::memory_order_relaxed);
}

void BindTensor(py::module_& m) {
  m.def("_set_size_type", [](py::object cls) {
    cls.inc_ref();
    size_type = cls.ptr();
  }, py::arg("cls"));
  m.def("_get_default_dtype", &DefaultFloatDType);
  m.def("_set_default_dtype", &SetDefaultFloatDType, py::arg("dtype"));
  // tessel.device("meta") as a context manager: [Note: deferred init] in core/tensor/factory.h.
  m.def("_set_deferred_init", &SetDeferredInit, py::arg("enabled"), "sets this thread's flag; returns the old one");
  BindDTypes(m);
  BindAutogradNode(m);
  BindCreation(m);
  BindGenerator(m);
  m.def("manual_seed", [](uint64_t seed) -> Generator& {
    DefaultGenerator() = Generator(seed);
    return DefaultGenerator();
  }, py::arg("seed"), py::return_value_policy::reference, "Reseeds this thread's default generator");
  m.def("default_generator", &DefaultGenerator, py::return_value_policy::reference);
  py::class_<Tensor>(m, "Tensor", "A cheap handle: copying it shares the data (torch.Tensor's names)")
      .def(py::init<const Tensor&>(), py::arg("other"))
      // torch's legacy constructor: Tensor(2, 3), Tensor([[6]]), Tensor(), Tensor(Size), Tensor(ndarray), in the
      // default dtype (tessel/_namespace_more.py: _legacy_tensor).
      .def(py::init([](const py::args& args, const py::kwargs& kwargs) {
        return py::module_::import("tessel._namespace_more").attr("_legacy_tensor")(*args, **kwargs).cast<Tensor>();
      }))
      .def_property_readonly("shape", [](const Tensor& t) { return SizeObject(t.sizes()); })
      .def("size", [](const Tensor& t, std::optional<int64_t> dim) -> py::object {
        if (dim) return py::int_(t.size(*dim));
        return SizeObject(t.sizes());
      }, py::arg("dim") = py::none())
      .def("stride", [](const Tensor& t, std::optional<int64_t> dim) -> py::object {
        if (dim) return py::int_(t.stride(*dim));
        return py::tuple(py::cast(t.strides()));
      }, py::arg("dim") = py::none())
      .def("dim", &Tensor::dim)
      .def_property_readonly("ndim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("is_distributed", &Tensor::is_distributed)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      // torch's output_nr: which output of its grad_fn this tensor is (0 for a leaf)
      .def_property_readonly("output_nr", [](const Tensor& t) {
        const AutogradMeta* meta = t.checked_impl()->autograd_meta();
        return meta != nullptr && meta->grad_fn ? meta->output_nr : 0;
      })
      // torch's version counter: bumped by every in-place write to the storage (views share it)
      .def_property_readonly("_version", [](const Tensor& t) { return t.defined() ? t.impl()->version() : 0u; })
      // For the in-place shape methods composed in Python (t_, unsqueeze_, resize_, ...), which torch counts
      // as in-place writes: one more (_bump_version_), or a given count (torch's _unsafe_set_version_counter).
      .def("_bump_version_", [](const Tensor& t) { LocalPiece(t).impl()->storage().BumpVersion(); })
      .def("_unsafe_set_version_counter",
           [](const Tensor& t, uint32_t v) { LocalPiece(t).impl()->storage().UnsafeRestoreVersion(v); })
      .def_property_readonly("grad_fn", [](const Tensor& t) -> std::shared_ptr<autograd::Node> { return t.grad_fn(); })
      // A non-leaf that requires grad may be asked to again (a no-op), as torch; only leaves change.
      .def_property("requires_grad", &Tensor::requires_grad, [](Tensor& t, bool v) {
        if (!(v && t.requires_grad())) t.set_requires_grad(v);
      })
      .def("requires_grad_", [](Tensor& t, bool v) -> Tensor& {
        return v && t.requires_grad() ? t : t.set_requires_grad(v);
      },
           py::arg("requires_grad") = true, py::return_value_policy::reference_internal)
      .def_property("grad", [](const Tensor& t) -> py::object {
        Tensor g = t.grad();
        if (!g.defined() && !t.is_leaf() &&
            !(t.checked_impl()->autograd_meta() != nullptr && t.impl()->autograd_meta()->retains_grad)) {
          // torch's warning: a non-leaf's .grad is never populated unless retain_grad() was called
          if (PyErr_WarnEx(PyExc_UserWarning,
                           "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
                           "attribute won't be populated during autograd.backward(). If you indeed want the .grad "
                           "field to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor. "
                           "If you access the non-leaf Tensor by mistake, make sure you access the leaf Tensor "
                           "instead. See github.com/pytorch/pytorch/pull/30531 for more informations.",
                           1) != 0) {
            throw py::error_already_set();
          }
        }
        return TensorObject(g);  // the same Python object while one is alive, as torch's
      }, [](const Tensor& t, py::object g) {
        if (g.is_none()) return t.set_grad(Tensor());
        if (!py::isinstance<Tensor>(g)) {  // torch's TypeError
          throw py::type_error(Str("assigned grad expected to be a Tensor or None but got grad of type ",
                                   py::type::of(g).attr("__name__").cast<std::string>()));
        }
        t.set_grad(g.cast<const Tensor&>());
        RememberTensorObject(g);  // `p.grad = g; p.grad is g`
      })
      .def("backward", [](const Tensor& t, std::optional<Tensor> gradient, bool retain_graph) {
        NoGil([&] { Backward(t, gradient ? *gradient : Tensor(), retain_graph); });
      }, py::arg("gradient") = py::none(), py::arg("retain_graph") = false)
      .def("detach", [](const Tensor& t) { return Detach(t); })
      .def("_variable_data", [](const Tensor& t) { return VariableData(t); })
      // torch's Tensor.register_hook(fn): fn(grad) -> a replacement or None (Python wraps it in a handle,
      // tessel/_compat.py); retain_grad keeps a non-leaf's .grad.
      .def("_register_hook", [](const Tensor& t, py::object fn) {
        TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, t.requires_grad(),
                          "cannot register a hook on a tensor that doesn't require gradient");
        auto f = ShareCallable(std::move(fn));  // dropped with the GIL (a recompute frees its tensors without it)
        return HookRemoverObject(RegisterHook(t, [f](const Tensor& g) -> Tensor {
          py::gil_scoped_acquire gil;
          py::object r = (*f)(g);
          if (r.is_none()) return Tensor();
          if (!py::isinstance<Tensor>(r)) {  // torch's TypeError (pybind11's cast error named no hook)
            const auto kind = py::type::of(r).attr("__name__").cast<std::string>();
            throw py::type_error(Str("expected Tensor, but hook returned '", kind, "'"));
          }
          return r.cast<Tensor>();
        }));
      })
      // torch's Tensor.register_post_accumulate_grad_hook(fn): fn(tensor) after a backward updated the leaf's
      // .grad (optimizer-in-backward); Python wraps it (tessel/_compat.py).
      .def("_register_post_accumulate_grad_hook", [](const Tensor& t, py::object fn) {
        auto f = ShareCallable(std::move(fn));  // dropped with the GIL (a recompute frees its tensors without it)
        return HookRemoverObject(RegisterPostAccumulateGradHook(t, [f](const Tensor& leaf) {
          py::gil_scoped_acquire gil;
          (*f)(leaf);
        }));
      })
      .def("retain_grad", [](const Tensor& t) {
        TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, t.requires_grad(),
                          "can't retain_grad on Tensor that has requires_grad=False");  // (torch's; it was accepted)
        RetainGrad(t);
      })
      // torch's retains_grad: True for a non-leaf after retain_grad() (a leaf's .grad is kept anyway: False)
      .def_property_readonly("retains_grad", [](const Tensor& t) {
        const AutogradMeta* meta = t.checked_impl()->autograd_meta();
        return !t.is_leaf() && meta != nullptr && meta->retains_grad;
      })
      // True when this Python object holds the only handle to its tensor and nothing shares the storage (no
      // module, view or saved activation sees it): rebinding the handle (_rebind_) is then indistinguishable
      // from writing in place. A DTensor's: its local shard held by it alone (DTensorImpl::OwnsDataExclusively).
      .def("_sole_handle", [](const Tensor& t) {
        return t.impl_ptr().use_count() == 1 && t.checked_impl()->OwnsDataExclusively();
      })
      .def("data_ptr", [](const Tensor& t) -> std::uintptr_t {
        // torch's: the address of the first element (views share their base's memory; 0 when empty); a
        // DTensor's is its local shard's.
        const Tensor local = LocalPiece(t);
        return local.numel() == 0 ? 0 : reinterpret_cast<std::uintptr_t>(local.raw_data());
      }, "The address of the first element (torch's data_ptr; a DTensor's local shard's)")
      // torch's is_meta: built under tessel.device("meta") and not yet to_empty'd ([Note: deferred init]).
      .def_property_readonly("is_meta", [](const Tensor& t) {
        return LocalPiece(t).impl()->storage().deferred_init();
      })
      .def("_clear_meta", [](const Tensor& t) {
        LocalPiece(t).impl()->storage().set_deferred_init(false);
      }, "Module.to_empty: the tensor counts as materialized")
      .def("_data_key", [](const Tensor& t) {
        const auto data = t.is_distributed() || t.numel() == 0 ? std::uintptr_t{0}
                                                                : reinterpret_cast<std::uintptr_t>(t.raw_data());
        return py::make_tuple(data, py::tuple(py::cast(t.sizes())), py::tuple(py::cast(t.strides())),
                              static_cast<int>(t.dtype()));
      }, "Identifies the data behind this handle: handles of one weight (tied parameters) share it")
      // torch's Tensor.set_(source): this tensor (every handle of it) becomes a view of source's data and shape.
      .def("set_", [](Tensor& self, const Tensor& source) -> Tensor& {
        self.checked_impl()->SetDataFrom(*source.checked_impl());
        return self;
      }, py::arg("source"))
      .def("_set_data",
           [](Tensor& self, const Tensor& source) { self.checked_impl()->SetDataFrom(*source.checked_impl(), true); },
           "torch's `tensor.data = source`: this tensor (every handle) takes source's data, shape and strides")
      .def("_rebind_", [](Tensor& self, const Tensor& other) {
        CarryTensorAttributes(self, other);  // the Python object keeps its attributes, as torch's
        self = other;
      },
           "Points this Python tensor at other's data and autograd history (recorded in-place writes)")
      .def("_storage", [](const Tensor& t) {
        // torch's untyped_storage(): the bytes this tensor and its views share, as (address, size in bytes)
        // (tessel/_compat.py wraps them); a DTensor's are its local shard's.
        const Tensor local = LocalPiece(t);
        const Storage& st = local.checked_impl()->storage();
        if (!st.defined() || st.nbytes() == 0) return py::make_tuple(std::uintptr_t{0}, int64_t{0});
        return py::make_tuple(reinterpret_cast<std::uintptr_t>(st.data()), st.nbytes());
      }, "(address, nbytes) of the storage under this tensor (a DTensor's local shard's)")
      .def("_owns_data_exclusively", [](const Tensor& t) { return t.checked_impl()->OwnsDataExclusively(); },
           "No other tensor (view or base) shares this tensor's storage")
      .def("item", [](const Tensor& t) -> py::object {
        // A Python number of the tensor's kind, as torch: int for integer dtypes (exact for every int64; a
        // float lost precision above 2^53 and broke lst[t.argmax().item()]), bool for bool.
        TESSEL_CHECK(t.numel() == 1, "a Tensor with ", t.numel(), " elements cannot be converted to Scalar (item: "
                     "shape ", ShapeStr(t.sizes()), ")");
        if (ReadableInPlace(t)) {  // 0.62 -> ~0.2 µs a call (torch: 0.20)
          return py::reinterpret_steal<py::object>(PyNumberAt(static_cast<const char*>(t.raw_data()), t.dtype()));
        }
        if (IsIntegral(t.dtype())) {
          const Tensor full = NoGil([&] { return t.is_distributed() ? t.impl()->MaterializeFull(t) : t; });
          Tensor c = Empty({1}, DType::kInt64);
          CopyInto(c, Reshape(full, {1}));
          return py::int_(c.data_ptr<int64_t>()[0]);
        }
        const double v = NoGil([&] { return t.ItemDouble(); });
        if (t.dtype() == DType::kBool) return py::bool_(v != 0);
        return py::float_(v);
      }, "The value of a one-element tensor as a Python number (a Partial DTensor is reduced: collective)")
      .def("numpy", &ToArray, "An array sharing this tensor's memory (a DTensor's: a gathered copy, collective)")
      // tolist() of a plain CPU tensor (tessel/_tensor.py takes the rest): nested lists built here, torch's
      // Python numbers (float, int, bool); through numpy it took 1.66 µs for 3 elements (torch: 0.25).
      .def("_tolist_in_place", [](const Tensor& t) -> py::object {
        if (!ReadableInPlace(t)) return py::none();
        static const char kNothing = 0;  // an empty tensor's lists read no element
        PyObject* out = PyListAt(t, 0, t.numel() == 0 ? &kNothing : static_cast<const char*>(t.raw_data()),
                                 ElementSize(t.dtype()));
        if (out == nullptr) throw py::error_already_set();
        return py::reinterpret_steal<py::object>(out);
      })
      .def("is_floating_point", [](const Tensor& t) { return IsFloating(t.dtype()); })
      // `if t:` / bool(t): torch's truth of a one-element tensor (NaN is true), read in place for a plain CPU
      // tensor (0.46 -> ~0.2 us; torch 0.25); a DTensor's through item() (a Partial one reduces: collective).
      .def("__bool__", [](const Tensor& t) -> bool {
        if (t.numel() != 1) {
          throw std::runtime_error(t.numel() == 0 ? "Boolean value of Tensor with no values is ambiguous"
                                                  : "Boolean value of Tensor with more than one value is ambiguous");
        }
        if (!ReadableInPlace(t)) return NoGil([&] { return t.ItemDouble(); }) != 0.0;
        py::object v =
            py::reinterpret_steal<py::object>(PyNumberAt(static_cast<const char*>(t.raw_data()), t.dtype()));
        return PyObject_IsTrue(v.ptr()) == 1;
      })
      .def("__repr__", &Repr)
      .def("__hash__", [](const Tensor& t) { return reinterpret_cast<intptr_t>(t.impl()); })
      .def("_is_same", &Tensor::is_same, "Both handles point at the same tensor (identity of parameters)");
  // [Note: bare Tensor.__new__] `Tensor.__new__(Tensor)` (and a subclass's, as copy / pickle protocols and
  // tessel's own Parameter wrapping call it) makes an instance whose C++ value __init__ has not built yet.
  // pybind11 allocates that value lazily when a method first reads it, as raw memory: a method called before
  // __init__ read garbage and crashed the interpreter. The value is now a default Tensor (no data: every
  // accessor raises "use of an undefined Tensor"); a later __init__ replaces it, as before (pybind11 then drops
  // the lazy value's 16 bytes without a word: only where a method ran before __init__).
  InstallTensorAttributes(py::type::of<Tensor>());
  m.def("_tensor_attrs", &TensorAttributes, "The tensor's attribute dict (torch's Tensor.__dict__), or None");
  py::detail::type_info* info = py::detail::get_type_info(typeid(Tensor));
  info->operator_new = [](size_t n) -> void* { return new (::operator new(n)) Tensor(); };
  // pybind11 frees a value whose holder __init__ never built without its destructor: run it, or a tensor stored
  // into that value (x._rebind_(...)) would never be released.
  static void (*const pybind_dealloc)(py::detail::value_and_holder&) = info->dealloc;
  info->dealloc = [](py::detail::value_and_holder& v_h) {
    if (!v_h.holder_constructed() && v_h.value_ptr() != nullptr) v_h.value_ptr<Tensor>()->~Tensor();
    pybind_dealloc(v_h);
  };
}

}  // namespace tessel::bindings
