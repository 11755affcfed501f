// Randomized property test of the whole op path: on random meshes (1-D to 3-D, up to 8 ranks), random
// shapes (sizes 0, 1 and sizes not divisible by the mesh included) and random placements (Shard,
// Replicate, Partial(sum)), a random op on DTensors equals the op on the full tensors, forward and
// backward. Every case prints its seed and description on failure; rerun one with --gtest_filter and
// TESSEL_OP_PROPERTY_SEED=<seed>.
#include <atomic>
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "core/ops/concat.h"
#include "core/ops/elementwise.h"
#include "core/ops/linear_gelu.h"
#include "core/ops/matmul.h"
#include "core/ops/reduction.h"
#include "core/ops/softmax.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::Values;

struct Rng {
  std::mt19937_64 gen;
  int64_t Int(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); }
  bool Coin(double p) { return std::uniform_real_distribution<double>(0, 1)(gen) < p; }
};

Shape RandomShape(Rng& r, int min_nd, int max_nd) {
  Shape s(static_cast<size_t>(r.Int(min_nd, max_nd)));
  for (int64_t& d : s) d = r.Coin(0.05) ? 0 : r.Coin(0.15) ? 1 : r.Int(2, 7);
  return s;
}

std::string RandomPlacements(Rng& r, int mesh_ndim, int64_t ndim, bool partial) {
  std::string s;
  for (int a = 0; a < mesh_ndim; ++a) {
    if (a) s += ", ";
    const double u = std::uniform_real_distribution<double>(0, 1)(r.gen);
    if (partial && u < 0.15) {
      s += "P(sum)";
    } else if (ndim > 0 && u < 0.7) {
      s += Str("S(", r.Int(0, ndim - 1), ")");
    } else {
      s += "R";
    }
  }
  return s;
}

struct Case {
  std::string name;
  TensorList inputs;
  std::function<Tensor(const TensorList&)> fn;
};

Case UnaryCase(Rng& r) {
  const int k = static_cast<int>(r.Int(0, 4));
  const char* names[] = {"gelu", "exp", "tanh", "neg", "relu"};
  return {names[k], {Values(RandomShape(r, 0, 3))}, [k](const TensorList& in) {
            switch (k) {
              case 0:
                return Gelu(in[0]);
              case 1:
                return Exp(in[0]);
              case 2:
                return Tanh(in[0]);
              case 3:
                return Neg(in[0]);
              default:
                return Relu(in[0]);
            }
          }};
}

Case BinaryCase(Rng& r) {
  const Shape a = RandomShape(r, 1, 3);
  Shape b(a.begin() + r.Int(0, static_cast<int64_t>(a.size())), a.end());
  for (int64_t& d : b) {
    if (r.Coin(0.3)) d = 1;
  }
  const int k = static_cast<int>(r.Int(0, 2));
  TensorList in = {Values(a), Values(b, DType::kFloat64, 1)};
  if (r.Coin(0.5)) std::swap(in[0], in[1]);
  return {Str("binary ", k), in, [k](const TensorList& x) {
            return k == 0 ? Add(x[0], x[1]) : k == 1 ? Sub(x[0], x[1]) : Mul(x[0], x[1]);
          }};
}

Case ReductionCase(Rng& r) {
  const Shape s = RandomShape(r, 1, 3);
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (r.Coin(0.5)) dims.push_back(d);
  }
  const bool keep = r.Coin(0.5);
  const bool empty = NumElements(s) == 0;
  const int k = static_cast<int>(r.Int(0, empty ? 1 : 2));  // amax needs a non-empty input
  return {Str("reduce ", k, " dims ", ShapeStr(dims), keep ? " keepdim" : ""),
          {Values(s)},
          [k, dims, keep](const TensorList& x) {
            return k == 0 ? Sum(x[0], dims, keep) : k == 1 ? Mean(x[0], dims, keep) : Amax(x[0], dims, keep);
          }};
}

Case ShapeCase(Rng& r) {
  const Shape s = RandomShape(r, 2, 3);
  const int64_t nd = static_cast<int64_t>(s.size());
  const int k = static_cast<int>(r.Int(0, 5));
  const int64_t d = r.Int(0, nd - 1);
  return {Str("shape op ", k, " dim ", d), {Values(s)}, [k, d, nd](const TensorList& x) {
            switch (k) {
              case 0:
                return Flatten(x[0]);
              case 1:
                return Flatten(x[0], nd - 2, nd - 1);
              case 2:
                return Transpose(x[0], d, nd - 1);
              case 3:
                return Softmax(x[0], d);
              case 4:
                return Narrow(x[0], d, 0, x[0].size(d) / 2);
              default:
                return Squeeze(Unsqueeze(x[0], d), d);
            }
          }};
}

Case MatmulCase(Rng& r) {
  const int64_t m = r.Int(1, 7), k = r.Int(1, 7), n = r.Int(1, 7);
  Shape a = {m, k};
  if (r.Coin(0.4)) a.insert(a.begin(), r.Int(1, 4));
  if (r.Coin(0.3)) {  // the fused MLP projection: x [.., m, k] · wᵀ [k, n] + b [n], then GELU
    return {"linear_gelu", {Values(a), Values({n, k}, DType::kFloat64, 2), Values({n}, DType::kFloat64, 5)},
            [](const TensorList& x) { return LinearGelu(x[0], x[1], x[2], "tanh"); }};
  }
  return {"matmul", {Values(a), Values({k, n}, DType::kFloat64, 2)}, [](const TensorList& x) {
            return Matmul(x[0], x[1]);
          }};
}

Case CatCase(Rng& r) {
  const Shape s = RandomShape(r, 1, 3);
  const int64_t d = r.Int(0, static_cast<int64_t>(s.size()) - 1);
  return {Str("cat ", d), {Values(s), Values(s, DType::kFloat64, 4)}, [d](const TensorList& x) { return Cat(x, d); }};
}

Case RandomCase(Rng& r) {
  switch (r.Int(0, 5)) {
    case 0:
      return UnaryCase(r);
    case 1:
      return BinaryCase(r);
    case 2:
      return ReductionCase(r);
    case 3:
      return ShapeCase(r);
    case 4:
      return MatmulCase(r);
    default:
      return CatCase(r);
  }
}

// Returns how many cases rank 0 checked (each compared against the dense op inside).
int RunCases(const std::vector<int64_t>& mesh_shape, const std::vector<std::string>& names, int num_cases,
             uint64_t seed) {
  std::atomic<int> checked{0};
  int world = 1;
  for (int64_t s : mesh_shape) world *= static_cast<int>(s);
  comm::RunRanks(
      world,
      [&](comm::ProcessGroupPtr pg) {
        DeviceMesh mesh = InitDeviceMesh(pg, mesh_shape, names);
        for (int c = 0; c < num_cases; ++c) {
          Rng r{std::mt19937_64(seed * 1000003 + static_cast<uint64_t>(c))};  // same on every rank
          Case k = RandomCase(r);
          std::vector<std::string> placements;
          for (const Tensor& t : k.inputs) placements.push_back(RandomPlacements(r, mesh.ndim(), t.dim(), true));
          std::string desc = Str("seed ", seed, " case ", c, ": ", k.name, " on ", ShapeStr(mesh_shape), " with");
          for (size_t i = 0; i < k.inputs.size(); ++i)
            desc += Str(" ", ShapeStr(k.inputs[i].sizes()), " [", placements[i], "]");
          SCOPED_TRACE(desc);
          try {
            testing::ExpectMatchesDense(mesh, k.inputs, placements, k.fn, true, 1e-9);
            if (pg->rank() == 0) ++checked;
          } catch (const std::exception& e) {
            ADD_FAILURE() << desc << ": " << e.what();
            throw;
          }
        }
      },
      testing::FastRanks());
  return checked.load();
}

uint64_t Seed() {
  const char* env = std::getenv("TESSEL_OP_PROPERTY_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : 20261201;
}

TEST(OpPropertyTest, RandomOpsOnRandomMeshesMatchTheDenseOpForwardAndBackward) {
  const uint64_t seed = Seed();
  int checked = RunCases({4}, {"x"}, 500, seed);
  checked += RunCases({3}, {"x"}, 300, seed + 1);
  checked += RunCases({2, 2}, {"dp", "tp"}, 500, seed + 2);
  checked += RunCases({2, 3}, {"dp", "tp"}, 300, seed + 3);
  checked += RunCases({2, 2, 2}, {"pp", "dp", "tp"}, 400, seed + 4);
  EXPECT_EQ(checked, 2000);  // the issue asks for at least 2,000 randomized cases per run
}

}  // namespace
}  // namespace tessel::dtensor
