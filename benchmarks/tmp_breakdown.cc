#include <omp.h>
#include <time.h>
#include <sys/resource.h>
#include <Eigen/Core>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>
#include "benchmarks/linear_workload.h"
#include "core/autograd/call.h"
#include "core/autograd/grad_mode.h"
#include "core/dispatch/op.h"
#include "core/ops/matmul.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "core/base/parallel.h"
using namespace tessel;
double Cpu() { timespec ts; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
template <class F> double T(F f, int reps) { f(); std::vector<double> v; for (int i = 0; i < reps; ++i) { double s = Cpu(); f(); v.push_back(Cpu() - s); } std::sort(v.begin(), v.end()); return v[0]*1e3; }
int main(int argc, char** argv) {
  SetNumThreads(1);
  const int64_t N = std::atoi(argv[1]), I = std::atoi(argv[2]), O = std::atoi(argv[3]); const int reps = std::atoi(argv[4]);
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Mat x = Mat::Random(N, I), w = Mat::Random(O, I), g = Mat::Ones(N, O), y(N, O), gx(N, I), gw(O, I);
  Generator gen(1);
  Tensor tx = Randn({N, I}, gen), tw = Randn({O, I}, gen), tg = Ones({N, O});
  for (int r = 0; r < 2; ++r) {
  std::printf("fwd eigen %.1f tessel %.1f\n", T([&] { y.noalias() = x * w.transpose(); }, reps), T([&] { NoGradGuard ng; Linear(tx, tw); }, reps));
  std::printf("gx  eigen %.1f tessel %.1f\n", T([&] { gx.noalias() = g * w; }, reps), T([&] { NoGradGuard ng; Matmul(tg, tw); }, reps));
  std::printf("gw  eigen %.1f tessel %.1f\n", T([&] { gw.noalias() = g.transpose() * x; }, reps), T([&] { NoGradGuard ng; autograd::CallOp1(GetOp("matmul"), {tg, tx}, Attrs().Set("transpose_a", true).Set("sum_batch", true)); }, reps));
  bench::LinearShape s{N, I, O};
  auto t = bench::MakeTesselLinearFwdBwd(s);
  auto e = bench::MakeEigenGemmFwdBwd(s);
  std::printf("all eigen %.1f tessel %.1f\n", T(e, reps), T(t, reps));
  rusage r0, r1; getrusage(RUSAGE_SELF, &r0); for (int i = 0; i < reps; ++i) t(); getrusage(RUSAGE_SELF, &r1);
  auto sec = [](timeval a, timeval b) { return (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_usec - a.tv_usec) * 1e-3; };
  std::printf("tessel per rep user %.1f sys %.1f minflt %ld\n", sec(r0.ru_utime, r1.ru_utime) / reps, sec(r0.ru_stime, r1.ru_stime) / reps, (r1.ru_minflt - r0.ru_minflt) / reps);
  getrusage(RUSAGE_SELF, &r0); for (int i = 0; i < reps; ++i) e(); getrusage(RUSAGE_SELF, &r1);
  std::printf("eigen per rep user %.1f sys %.1f minflt %ld\n", sec(r0.ru_utime, r1.ru_utime) / reps, sec(r0.ru_stime, r1.ru_stime) / reps, (r1.ru_minflt - r0.ru_minflt) / reps);
  }
}
