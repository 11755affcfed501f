// Every collective of the threads backend × world sizes 1–8 × dtypes × shapes (empty, 0-d, sizes that
// do not divide by the world size, uneven all_to_all splits), checked against naive loops in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "comm/backends/threads.h"
#include "comm/comm_thread.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::comm {
namespace {

const DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16,
                         DType::kInt64,   DType::kInt32,   DType::kBool};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct};

// Small integers: exact in every dtype, products of 8 stay exact in bf16 (|v| <= 2).
double Val(int rank, int64_t i, int salt, DType dtype) {
  const double v = static_cast<double>((rank * 3 + i * 7 + salt) % 5) - 2;
  return dtype == DType::kBool ? (v > 0) : v;
}

std::vector<double> Vals(int rank, int64_t n, int salt, DType dtype) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = Val(rank, i, salt, dtype);
  return v;
}

// Elements [2r, 2r + 2) of a 1-d tensor, as a view.
Tensor MakeViewOfSlice(const Tensor& t, int r) { return MakeView(t, {2}, {1}, t.storage_offset() + 2 * r); }

Tensor Make(const std::vector<double>& v, const Shape& shape, DType dtype) { return FromDoubles(v, shape, dtype); }

// The reduction of `vals` (one per rank) as the backend defines it: in double, then (avg) the quotient
// computed in the dtype's compute type, rounded once.
double Reduce(const std::vector<double>& vals, ReduceOp op, DType dtype) {
  double acc = vals[0];
  for (size_t j = 1; j < vals.size(); ++j) {
    const double x = vals[j];
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += x; break;
      case ReduceOp::kProduct: acc *= x; break;
      case ReduceOp::kMax: acc = std::max(acc, x); break;
      case ReduceOp::kMin: acc = std::min(acc, x); break;
    }
  }
  if (dtype == DType::kBool) return acc != 0;
  if (op == ReduceOp::kAvg) {
    if (dtype == DType::kFloat64) return acc / static_cast<double>(vals.size());
    return static_cast<float>(acc) / static_cast<float>(vals.size());
  }
  return acc;
}

bool OpApplies(ReduceOp op, DType dtype) { return op != ReduceOp::kAvg || IsFloating(dtype); }

// Rounds expected doubles through `dtype` (FromDoubles) so bf16/fp16 results compare exactly.
void ExpectValues(const Tensor& got, const std::vector<double>& want, DType dtype) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  EXPECT_EQ(got.ToDoubleVector(), Make(want, {static_cast<int64_t>(want.size())}, dtype).ToDoubleVector());
}

void CheckAllReduce(ProcessGroup& pg, DType dtype, const Shape& shape) {
  const int world = pg.size();
  const int64_t n = NumElements(shape);
  for (ReduceOp op : kOps) {
    if (!OpApplies(op, dtype)) continue;
    SCOPED_TRACE(Str("all_reduce ", ReduceOpName(op), " ", dtype, " ", ShapeStr(shape)));
    Tensor t = Make(Vals(pg.rank(), n, 1, dtype), shape, dtype);
    pg.AllReduce(t, op)->Wait();
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) {
      std::vector<double> per_rank;
      for (int r = 0; r < world; ++r) per_rank.push_back(Val(r, i, 1, dtype));
      want[i] = Reduce(per_rank, op, dtype);
    }
    ExpectValues(t, want, dtype);
    EXPECT_EQ(t.sizes(), shape);
  }
}

void CheckAllGather(ProcessGroup& pg, DType dtype, const Shape& shape) {
  SCOPED_TRACE(Str("all_gather ", dtype, " ", ShapeStr(shape)));
  const int world = pg.size();
  const int64_t n = NumElements(shape);
  Shape out_shape = shape.empty() ? Shape{world} : shape;
  if (!shape.empty()) out_shape[0] *= world;
  Tensor in = Make(Vals(pg.rank(), n, 2, dtype), shape, dtype);
  Tensor out = Full(out_shape, -7, dtype);
  pg.AllGather(out, in)->Wait();
  std::vector<double> want;
  for (int r = 0; r < world; ++r) {
    for (double v : Vals(r, n, 2, dtype)) want.push_back(v);
  }
  ExpectValues(out, want, dtype);
}

void CheckReduceScatter(ProcessGroup& pg, DType dtype, int64_t rows) {
  const int world = pg.size();
  const int64_t cols = 3, n_out = rows * cols;
  for (ReduceOp op : kOps) {
    if (!OpApplies(op, dtype)) continue;
    SCOPED_TRACE(Str("reduce_scatter ", ReduceOpName(op), " ", dtype, " rows ", rows));
    Tensor in = Make(Vals(pg.rank(), world * n_out, 3, dtype), {world * rows, cols}, dtype);
    Tensor out = Full({rows, cols}, -7, dtype);
    pg.ReduceScatter(out, in, op)->Wait();
    std::vector<double> want(n_out);
    for (int64_t i = 0; i < n_out; ++i) {
      std::vector<double> per_rank;
      for (int r = 0; r < world; ++r) per_rank.push_back(Val(r, pg.rank() * n_out + i, 3, dtype));
      want[i] = Reduce(per_rank, op, dtype);
    }
    ExpectValues(out, want, dtype);
  }
}

// Rank r sends (r + 2j) % 3 rows of width 2 to rank j: uneven, sometimes empty.
int64_t Rows(int src, int dst) { return (src + 2 * dst) % 3; }

void CheckAllToAll(ProcessGroup& pg, DType dtype) {
  SCOPED_TRACE(Str("all_to_all ", dtype));
  const int world = pg.size(), me = pg.rank();
  const int64_t width = 2;
  std::vector<int64_t> in_splits, out_splits;
  for (int j = 0; j < world; ++j) in_splits.push_back(Rows(me, j)), out_splits.push_back(Rows(j, me));
  int64_t in_rows = 0, out_rows = 0;
  for (int j = 0; j < world; ++j) in_rows += in_splits[j], out_rows += out_splits[j];
  // Row k of rank r's input holds value-coded (r, k) pairs.
  auto row_val = [&](int r, int64_t k, int64_t c) { return Val(r, k * width + c, 4, dtype); };
  std::vector<double> in_vals;
  for (int64_t k = 0; k < in_rows; ++k)
    for (int64_t c = 0; c < width; ++c) in_vals.push_back(row_val(me, k, c));
  Tensor in = Make(in_vals, {in_rows, width}, dtype);
  Tensor out = Full({out_rows, width}, -7, dtype);
  pg.AllToAll(out, in, out_splits, in_splits)->Wait();
  std::vector<double> want;
  for (int j = 0; j < world; ++j) {
    int64_t first = 0;  // first row rank j sends to me
    for (int k = 0; k < me; ++k) first += Rows(j, k);
    for (int64_t k = first; k < first + Rows(j, me); ++k)
      for (int64_t c = 0; c < width; ++c) want.push_back(row_val(j, k, c));
  }
  ExpectValues(out, want, dtype);
}

void CheckEqualSplitAllToAll(ProcessGroup& pg, DType dtype) {
  const int world = pg.size();
  Tensor in = Make(Vals(pg.rank(), world * 2, 5, dtype), {world * 2}, dtype);
  Tensor out = Full({world * 2}, -7, dtype);
  pg.AllToAll(out, in, {}, {})->Wait();
  std::vector<double> want;
  for (int j = 0; j < world; ++j)
    for (int64_t k = 0; k < 2; ++k) want.push_back(Val(j, pg.rank() * 2 + k, 5, dtype));
  ExpectValues(out, want, dtype);
}

void CheckBroadcast(ProcessGroup& pg, DType dtype, const Shape& shape) {
  SCOPED_TRACE(Str("broadcast ", dtype, " ", ShapeStr(shape)));
  const int root = pg.size() - 1;
  const int64_t n = NumElements(shape);
  Tensor t = Make(Vals(pg.rank(), n, 6, dtype), shape, dtype);
  pg.Broadcast(t, root)->Wait();
  ExpectValues(t, Vals(root, n, 6, dtype), dtype);
}

TEST(ThreadsCollectivesTest, EveryCollectiveMatchesNaiveLoopsForWorldSizesOneToEight) {
  const std::vector<Shape> shapes = {{0}, {}, {1}, {5}, {3, 4}, {7, 3}};
  for (int world = 1; world <= 8; ++world) {
    SCOPED_TRACE(Str("world ", world));
    RunRanks(world, [&](ProcessGroupPtr pg) {
      for (DType dtype : kDTypes) {
        for (const Shape& shape : shapes) {
          CheckAllReduce(*pg, dtype, shape);
          CheckAllGather(*pg, dtype, shape);
          CheckBroadcast(*pg, dtype, shape);
        }
        for (int64_t rows : {0, 1, 3}) CheckReduceScatter(*pg, dtype, rows);
        CheckAllToAll(*pg, dtype);
        CheckEqualSplitAllToAll(*pg, dtype);
        pg->Barrier()->Wait();
      }
    });
  }
}

TEST(ThreadsCollectivesTest, LargeAllReduceSplitsChunksAcrossRanksAndAgreesBitwise) {
  // 200003 elements (above the staged size, so chunked): chunk boundaries do not align with the block
  // size or the world size.
  RunRanks(3, [](ProcessGroupPtr pg) {
    const int64_t n = 200003;
    std::vector<double> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = std::sin(0.001 * i + pg->rank());
    Tensor t = FromDoubles(v, Shape{n}, DType::kBFloat16);
    pg->AllReduce(t, ReduceOp::kSum)->Wait();
    const std::vector<double> got = t.ToDoubleVector();
    for (int64_t i = 0; i < n; i += 997) {
      float acc = 0;
      for (int r = 0; r < 3; ++r) acc += BFloat16BitsToFloat(FloatToBFloat16Bits(static_cast<float>(std::sin(0.001 * i + r))));
      EXPECT_EQ(got[i], BFloat16BitsToFloat(FloatToBFloat16Bits(acc))) << i;
    }
  });
}

TEST(ThreadsCollectivesTest, StagedAndDirectCollectivesBothSumInRankOrder) {
  // 1000 floats run staged (one copy of each input, no completion barrier); 70001 floats (280 KB, over
  // the 256 KiB staged limit) run directly. Both must give every rank the float sum in rank order,
  // bit for bit, including in place (all_reduce) and with the input aliasing the output.
  auto value = [](int64_t i, int r) { return static_cast<float>(std::sin(0.01 * i + 0.7 * r)); };
  for (const int64_t n : {int64_t{1000}, int64_t{70001}}) {
    RunRanks(3, [&](ProcessGroupPtr pg) {
      const int r = pg->rank();
      std::vector<double> mine(n);
      for (int64_t i = 0; i < n; ++i) mine[i] = value(i, r);
      Tensor ar = FromDoubles(mine, Shape{n});
      pg->AllReduce(ar, ReduceOp::kSum)->Wait();
      Tensor gathered = Zeros({3 * n});
      Tensor slot = MakeView(gathered, {n}, {1}, r * n);
      CopyInto(slot, FromDoubles(mine, Shape{n}));
      pg->AllGather(gathered, slot)->Wait();  // the input is this rank's slice of the output
      Tensor scattered = Zeros({n / 3});
      pg->ReduceScatter(scattered, FromDoubles(std::vector<double>(mine.begin(), mine.begin() + n / 3 * 3),
                                               Shape{n / 3 * 3}), ReduceOp::kSum)->Wait();
      const std::vector<double> got_ar = ar.ToDoubleVector(), got_ag = gathered.ToDoubleVector();
      const std::vector<double> got_rs = scattered.ToDoubleVector();
      int bad = 0;
      for (int64_t i = 0; i < n && bad < 3; ++i) {
        const float want = (value(i, 0) + value(i, 1)) + value(i, 2);
        if (got_ar[i] != want) ++bad, ADD_FAILURE() << "n=" << n << " all_reduce[" << i << "] " << got_ar[i];
        for (int j = 0; j < 3; ++j) {
          if (got_ag[j * n + i] != value(i, j)) ++bad, ADD_FAILURE() << "n=" << n << " all_gather " << j << "," << i;
        }
      }
      for (int64_t i = 0; i < n / 3 && bad < 3; ++i) {
        const int64_t k = r * (n / 3) + i;
        const float want = (value(k, 0) + value(k, 1)) + value(k, 2);
        if (got_rs[i] != want) ++bad, ADD_FAILURE() << "n=" << n << " reduce_scatter[" << i << "] " << got_rs[i];
      }
    });
  }
}

TEST(ThreadsCollectivesTest, LargeOutputsTakeTheStreamingStorePathAndStayExact) {
  // 1000003 floats: each rank's all_reduce chunk is ~2 MB (streamed) and chunk 1 starts unaligned.
  RunRanks(2, [](ProcessGroupPtr pg) {
    const int64_t n = 1000003;
    std::vector<double> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>((i * 13 + pg->rank()) % 1000);
    Tensor t = FromDoubles(v, Shape{n});
    pg->AllReduce(t, ReduceOp::kSum)->Wait();
    Tensor rs = Zeros({(n - 1) / 2});
    pg->ReduceScatter(rs, FromDoubles(std::vector<double>(n - 1, pg->rank() + 0.5), Shape{n - 1}), ReduceOp::kMax)
        ->Wait();
    const std::vector<double> got = t.ToDoubleVector();
    for (int64_t i = 0; i < n; ++i) {
      const double want = static_cast<double>((i * 13) % 1000 + (i * 13 + 1) % 1000);
      if (got[i] != want) {
        ADD_FAILURE() << "element " << i << ": " << got[i] << " != " << want;
        break;
      }
    }
    EXPECT_EQ(rs.ToDoubleVector(), std::vector<double>((n - 1) / 2, 1.5));
  });
}

TEST(ThreadsCollectivesTest, InPlaceAllGatherAndReduceScatterWork) {
  RunRanks(4, [](ProcessGroupPtr pg) {
    const int r = pg->rank();
    Tensor buf = Zeros({8});
    Tensor mine = MakeViewOfSlice(buf, r);
    FillInPlace(mine, r + 1);
    pg->AllGather(buf, mine)->Wait();
    EXPECT_EQ(buf.ToVector<double>(), (std::vector<double>{1, 1, 2, 2, 3, 3, 4, 4}));
    // reduce_scatter whose output is this rank's slice of its own input
    Tensor in = Full({8}, r + 1);
    pg->ReduceScatter(MakeViewOfSlice(in, r), in, ReduceOp::kSum)->Wait();
    EXPECT_EQ(MakeViewOfSlice(in, r).ToVector<double>(), (std::vector<double>{10, 10}));
  });
}

TEST(ThreadsCollectivesTest, AllGatherInputOverlappingTheOutputElsewhereIsRejectedBeforeAnyCopy) {
  RunRanks(2, [](ProcessGroupPtr pg) {
    Tensor buf = Zeros({4});
    // The other rank's block, and a block straddling both: each would be read while being written.
    for (int64_t offset : {int64_t{2} * (1 - pg->rank()), int64_t{1}}) {
      try {
        pg->AllGather(buf, MakeView(buf, {2}, {1}, offset));
        ADD_FAILURE() << "expected an error for offset " << offset;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_NE(std::string(e.what()).find(Str("overlaps the output but is not rank ", pg->rank(), "'s block")),
                  std::string::npos) << e.what();
      }
    }
    pg->Barrier()->Wait();  // the rejected calls were never issued: the group is still in step
  });
}

// The same for reduce_scatter: an output inside the input other than this rank's block is written while a
// peer reads it (with inputs over 256 KiB, on the direct path, rank 0 read 4 where the sum was 3).
TEST(ThreadsCollectivesTest, ReduceScatterOutputOverlappingTheInputElsewhereIsRejectedBeforeAnyCopy) {
  RunRanks(2, [](ProcessGroupPtr pg) {
    for (int64_t n : {int64_t{2}, int64_t{1} << 18}) {
      Tensor in = Full({2 * n}, pg->rank() + 1);
      for (int64_t offset : {n * (1 - pg->rank()), n / 2}) {
        try {
          pg->ReduceScatter(MakeView(in, {n}, {1}, offset), in, ReduceOp::kSum);
          ADD_FAILURE() << "expected an error for offset " << offset;
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
          EXPECT_NE(std::string(e.what()).find(Str("overlaps the input but is not rank ", pg->rank(), "'s block")),
                    std::string::npos) << e.what();
        }
      }
    }
    pg->Barrier()->Wait();
  });
}

TEST(ThreadsCollectivesTest, WaitReturnsOnlyAfterTheCommThreadDroppedWhatTheCallCaptured) {
  // Memory peaks must not depend on thread timing: once Wait() returns, the backend must hold no
  // reference to the call's tensors, so dropping the caller's handles frees them at once (the FSDP
  // ledger test relies on it). A captured object with a slow destructor makes the order observable.
  struct SlowToDestroy {
    explicit SlowToDestroy(std::atomic<bool>* flag) : destroyed(flag) {}
    std::atomic<bool>* destroyed;
    ~SlowToDestroy() {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      destroyed->store(true);
    }
  };
  std::atomic<bool> destroyed{false};
  CommThread thread(1, CurrentDevice());
  {
    auto captured = std::make_shared<SlowToDestroy>(&destroyed);
    WorkPtr work = thread.Submit([captured] {});
    captured.reset();
    work->Wait();
  }
  EXPECT_TRUE(destroyed.load()) << "Wait() returned while the comm thread still held the call's captures";
}

TEST(ThreadsCollectivesTest, RankThreadsGetTheirDeviceAndThreadBudget) {
  RunRanks(2, [](ProcessGroupPtr pg) {
    EXPECT_EQ(CurrentDevice(), Device::Cpu(pg->rank()));
    EXPECT_EQ(NumThreads(), std::max(1, HardwareConcurrency() / 2));
    EXPECT_EQ(pg->backend_name(), "threads");
    EXPECT_EQ(pg->global_ranks(), (std::vector<int>{0, 1}));
  });
  RunRanksOptions options;
  options.threads_per_rank = 3;
  RunRanks(2, [](ProcessGroupPtr) { EXPECT_EQ(NumThreads(), 3); }, options);
}

TEST(ThreadsCollectivesTest, WorkIsPendingUntilThePeerArrivesSoComputeCanOverlap) {
  RunRanks(2, [](ProcessGroupPtr pg) {
    Tensor t = Full({4}, pg->rank() + 1);
    if (pg->rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    WorkPtr w = pg->AllReduce(t, ReduceOp::kSum);
    if (pg->rank() == 0) {
      EXPECT_FALSE(w->IsCompleted());
    }
    w->Wait();
    EXPECT_TRUE(w->IsCompleted());
    w->Wait();  // waiting twice is fine
    EXPECT_EQ(t.ToVector<double>(), (std::vector<double>(4, 3)));
  });
}

TEST(ThreadsCollectivesTest, CallsOnOneGroupCompleteInIssueOrder) {
  RunRanks(3, [](ProcessGroupPtr pg) {
    Tensor t = Full({16}, 1);
    std::vector<WorkPtr> works;
    for (int i = 0; i < 5; ++i) works.push_back(pg->AllReduce(t, ReduceOp::kSum));  // 1 → 3 → 9 → 27 → 81 → 243
    works.back()->Wait();
    for (auto& w : works) EXPECT_TRUE(w->IsCompleted());
    EXPECT_EQ(t.ToVector<double>(), (std::vector<double>(16, 243)));
  });
}

}  // namespace
}  // namespace tessel::comm
