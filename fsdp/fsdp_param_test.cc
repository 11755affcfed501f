// fsdp/fsdp_param_test.cc — FsdpParam and the flat buffers on the example of [Note: FSDP layout]:
// W = 2, a [3, 2] and b [1, 2]. Values are small integers (exact).
#include "fsdp/fsdp_param.h"

#include <gtest/gtest.h>

#include "comm/backends/threads.h"
#include "core/autograd/grad_mode.h"
#include "core/memory/allocator.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"
#include "dtensor/dtensor.h"
#include "fsdp/collectives.h"

namespace tessel::fsdp {
namespace {

class TwoParams final : public nn::Module {
 public:
  TwoParams() : Module("TwoParams") {
    RegisterParameter("a", FromVector<float>({1, 2, 3, 4, 5, 6}, {3, 2}));
    RegisterParameter("b", FromVector<float>({7, 8}, {1, 2}));
  }
  TensorList Forward(const TensorList& in) override { return in; }
};

struct Fixture {
  TwoParams module;
  std::vector<std::unique_ptr<FsdpParam>> owned;
  std::vector<FsdpParam*> params;
  FlatLayout layout;
  FsdpMeshInfo info;

  explicit Fixture(const dtensor::DeviceMesh& mesh) : info{.mesh = mesh, .shard_axis = 0, .replicate_axis = std::nullopt} {
    for (const char* name : {"a", "b"}) {
      owned.push_back(std::make_unique<FsdpParam>(&module, std::vector<std::string>{name}, module.Param(name), info,
                                                  MixedPrecisionPolicy{}));
      params.push_back(owned.back().get());
    }
    layout = FlatLayout::Of(params);
  }
};

void OnTwoRanks(const std::function<void(int rank, Fixture&)>& fn) {
  comm::RunRanks(2, [&](comm::ProcessGroupPtr world) {
    Fixture f(dtensor::InitDeviceMesh(world, {2}, {"dp"}));
    fn(world->rank(), f);
  });
}

TEST(FsdpParamTest, FlatLayoutPadsEachParameterToCeilRowsTimesTheWorld) {
  OnTwoRanks([](int rank, Fixture& f) {
    EXPECT_EQ(f.params[0]->padded_shard_numel(), 4);  // chunk(a) = 2 rows of 2
    EXPECT_EQ(f.params[1]->padded_shard_numel(), 2);  // chunk(b) = 1 row
    EXPECT_EQ(f.layout.offsets, (std::vector<int64_t>{0, 4}));
    EXPECT_EQ(f.layout.shard_numel, 6);
    EXPECT_EQ(f.params[0]->local_size(), rank == 0 ? 2 : 1);
    EXPECT_EQ(f.params[1]->local_size(), rank == 0 ? 1 : 0);
    // The module sees the sharded DTensors once they are installed.
    for (FsdpParam* p : f.params) p->ToSharded();
    EXPECT_TRUE(f.module.Param("a").is_distributed());
    EXPECT_EQ(dtensor::DTensor(f.module.Param("a")).ToLocal().ToVector<float>(),
              rank == 0 ? std::vector<float>({1, 2, 3, 4}) : std::vector<float>({5, 6}));
  });
}

TEST(FsdpParamTest, AllGatherOutputIsRankMajorWithZeroPaddingAndCopyOutRestoresTheParameters) {
  OnTwoRanks([](int, Fixture& f) {
    AllGatherResult r = IssueAllGather(f.params, f.layout, DType::kFloat32, f.info.shard_group());
    r.work->Wait();
    //                   rank 0 block: a rows 0-1, b row 0 | rank 1 block: a row 2, zero row, b zero row
    EXPECT_EQ(r.output.ToVector<float>(), (std::vector<float>{1, 2, 3, 4, 7, 8, 5, 6, 0, 0, 0, 0}));
    FinishAllGather(r, f.params, f.layout);
    EXPECT_FALSE(r.output.defined());
    EXPECT_EQ(f.params[0]->unsharded_param().ToVector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
    EXPECT_EQ(f.params[1]->unsharded_param().ToVector<float>(), (std::vector<float>{7, 8}));
    EXPECT_EQ(f.params[0]->unsharded_param().sizes(), (Shape{3, 2}));
  });
}

TEST(FsdpParamTest, ReshardFreesTheBytesButKeepsTheHandleAndItsVersion) {
  OnTwoRanks([](int, Fixture& f) {
    AllGatherResult r = IssueAllGather(f.params, f.layout, DType::kFloat32, f.info.shard_group());
    FinishAllGather(r, f.params, f.layout);
    const Tensor handle = f.params[0]->unsharded_param();
    const uint32_t version = handle.impl()->version();
    const int64_t live = memory::Stats(CurrentDevice())[memory::Ledger::kParams].live;
    for (FsdpParam* p : f.params) p->FreeUnsharded();
    // a: 2 ranks x 4 padded elements, b: 2 x 2, fp32.
    EXPECT_EQ(memory::Stats(CurrentDevice())[memory::Ledger::kParams].live, live - (8 + 4) * 4);
    r = IssueAllGather(f.params, f.layout, DType::kFloat32, f.info.shard_group());
    FinishAllGather(r, f.params, f.layout);
    EXPECT_TRUE(f.params[0]->unsharded_param().is_same(handle));
    EXPECT_EQ(handle.impl()->version(), version);  // tensors saved for backward stay valid
    EXPECT_EQ(handle.ToVector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  });
}

TEST(FsdpParamTest, FoldedGradientsAreRankMajorAndTheReduceScatterAveragesThem) {
  OnTwoRanks([](int rank, Fixture& f) {
    NoGradGuard no_grad;
    const float s = rank == 0 ? 1.0f : 3.0f;  // ranks contribute s * g: the average is 2 * g
    const Tensor ga = FromVector<float>({s * 1, s * 2, s * 3, s * 4, s * 5, s * 6}, {3, 2});
    const Tensor gb = FromVector<float>({s * 7, s * 8}, {1, 2});
    Tensor input = Full({12}, -1.0, DType::kFloat32);  // padding must be overwritten with zeros
    f.params[0]->FoldGradInto(ga, input, 0, 6, /*accumulate=*/false);
    f.params[1]->FoldGradInto(gb, input, 4, 6, false);
    EXPECT_EQ(input.ToVector<float>(),
              (std::vector<float>{s * 1, s * 2, s * 3, s * 4, s * 7, s * 8, s * 5, s * 6, 0, 0, 0, 0}));
    ReduceSpec spec{.dtype = DType::kFloat32, .divide_factor = std::nullopt, .shard_group = f.info.shard_group(),
                    .replicate_group = nullptr};
    ReduceScatterResult r = IssueReduceScatter(input, {.params = f.params, .offsets = f.layout.offsets, .block_numel = 6}, spec);
    FinishReduceScatter(r, spec);
    const Tensor grad_a = f.params[0]->sharded_param().grad();
    ASSERT_TRUE(grad_a.is_distributed());
    EXPECT_EQ(dtensor::DTensor(grad_a).ToLocal().ToVector<float>(),
              rank == 0 ? std::vector<float>({2, 4, 6, 8}) : std::vector<float>({10, 12}));
    EXPECT_EQ(dtensor::DTensor(f.params[1]->sharded_param().grad()).ToLocal().ToVector<float>(),
              rank == 0 ? std::vector<float>({14, 16}) : std::vector<float>{});
    EXPECT_EQ(grad_a.sizes(), (Shape{3, 2}));
  });
}

TEST(FsdpParamTest, ReducedGradientFlagsDecideWhichParametersGetAGradOnEveryRank) {
  // [Note: FSDP gradient flags]: rank 0 has a gradient for a only, rank 1 for b only (its a rows are
  // zeros). Blocks of 6 + 16 flags; both ranks give both parameters the average; a parameter flagged by
  // no rank (the second round: b nowhere) gets no .grad.
  OnTwoRanks([](int rank, Fixture& f) {
    NoGradGuard no_grad;
    EXPECT_EQ(GradFlagNumel(2), 16);
    EXPECT_EQ(GradFlagNumel(17), 32);
    const ReduceSpec spec{.dtype = DType::kFloat32, .divide_factor = std::nullopt,
                          .shard_group = f.info.shard_group(), .replicate_group = nullptr};
    auto reduce = [&](const std::vector<bool>& has) {
      Tensor input = Zeros({2 * 22}, DType::kFloat32);
      const Tensor ga = FromVector<float>({1, 2, 3, 4, 5, 6}, {3, 2}), gb = FromVector<float>({7, 8}, {1, 2});
      if (has[0]) f.params[0]->FoldGradInto(ga, input, 0, 22, /*accumulate=*/false);
      if (has[1]) f.params[1]->FoldGradInto(gb, input, 4, 22, false);
      for (int64_t j = 0; j < 2; ++j) {
        for (int64_t i = 0; i < 2; ++i) {
          if (has[i]) FillInPlace(MakeView(input, {1}, {1}, j * 22 + 6 + i), 1.0);
        }
      }
      ReduceScatterResult r = IssueReduceScatter(
          input, {.params = f.params, .offsets = f.layout.offsets, .block_numel = 22, .flag_offset = 6}, spec);
      FinishReduceScatter(r, spec);
    };
    reduce(rank == 0 ? std::vector<bool>{true, false} : std::vector<bool>{false, true});
    const Tensor grad_a = f.params[0]->sharded_param().grad(), grad_b = f.params[1]->sharded_param().grad();
    ASSERT_TRUE(grad_a.defined() && grad_b.defined());
    EXPECT_EQ(dtensor::DTensor(grad_a).ToLocal().ToVector<float>(),
              rank == 0 ? std::vector<float>({0.5, 1, 1.5, 2}) : std::vector<float>({2.5, 3}));
    EXPECT_EQ(dtensor::DTensor(grad_b).ToLocal().ToVector<float>(),
              rank == 0 ? std::vector<float>({3.5, 4}) : std::vector<float>{});
    for (FsdpParam* p : f.params) p->sharded_param().set_grad(Tensor());
    reduce({true, false});
    EXPECT_TRUE(f.params[0]->sharded_param().grad().defined());
    EXPECT_FALSE(f.params[1]->sharded_param().grad().defined());
  });
}

// [Note: FSDP layout], Shard(1): W = 2, c [2, 4] = [[1, 2, 3, 4], [5, 6, 7, 8]] on dim 1 next to a on dim 0.
TEST(FsdpParamTest, ShardOnDimOneKeepsContiguousColumnBlocksAndCopiesOutAndFoldsThemStrided) {
  class ColumnParams final : public nn::Module {
   public:
    ColumnParams() : Module("ColumnParams") {
      RegisterParameter("a", FromVector<float>({1, 2, 3, 4, 5, 6}, {3, 2}));
      RegisterParameter("c", FromVector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}));
    }
    TensorList Forward(const TensorList& in) override { return in; }
  };
  comm::RunRanks(2, [&](comm::ProcessGroupPtr world) {
    const int rank = world->rank();
    ColumnParams module;
    const FsdpMeshInfo info{.mesh = dtensor::InitDeviceMesh(world, {2}, {"dp"}), .shard_axis = 0,
                            .replicate_axis = std::nullopt};
    std::vector<std::unique_ptr<FsdpParam>> owned;
    owned.push_back(std::make_unique<FsdpParam>(&module, std::vector<std::string>{"a"}, module.Param("a"), info,
                                                MixedPrecisionPolicy{}));
    owned.push_back(std::make_unique<FsdpParam>(&module, std::vector<std::string>{"c"}, module.Param("c"), info,
                                                MixedPrecisionPolicy{}, /*shard_dim=*/1));
    std::vector<FsdpParam*> params = {owned[0].get(), owned[1].get()};
    const FlatLayout layout = FlatLayout::Of(params);
    FsdpParam& c = *owned[1];
    EXPECT_EQ(c.shard_dim(), 1);
    EXPECT_EQ(c.local_size(), 2);
    EXPECT_EQ(c.padded_shard_numel(), 4);
    EXPECT_EQ(layout.shard_numel, 8);
    const dtensor::DTensor sharded(c.sharded_param());
    EXPECT_EQ(dtensor::PlacementsToString(sharded.placements()), "[S(1)]");
    EXPECT_EQ(sharded.ToLocal().sizes(), (Shape{2, 2}));
    EXPECT_EQ(sharded.ToLocal().ToVector<float>(),
              rank == 0 ? std::vector<float>({1, 2, 5, 6}) : std::vector<float>({3, 4, 7, 8}));
    EXPECT_EQ(sharded.FullTensor().ToVector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));

    // All-gather: each block is [a's rows | c's contiguous column shard]; copy-out concatenates c's along dim 1.
    for (int round = 0; round < 2; ++round) {
      AllGatherResult r = IssueAllGather(params, layout, DType::kFloat32, info.shard_group());
      r.work->Wait();
      EXPECT_EQ(r.output.ToVector<float>(), (std::vector<float>{1, 2, 3, 4, 1, 2, 5, 6, 5, 6, 0, 0, 3, 4, 7, 8}));
      uint32_t version = 0;
      if (round == 1) version = c.unsharded_param().impl()->version();
      FinishAllGather(r, params, layout);
      EXPECT_EQ(c.unsharded_param().sizes(), (Shape{2, 4}));
      EXPECT_TRUE(c.unsharded_param().is_contiguous());
      EXPECT_EQ(c.unsharded_param().ToVector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
      // The second copy-out refills the same handle without bumping its version (saved tensors stay valid).
      if (round == 1) EXPECT_EQ(c.unsharded_param().impl()->version(), version);
      for (FsdpParam* p : params) p->FreeUnsharded();
    }

    // reshard_after_forward=<int>'s piece: rank block j of c is columns [2j, 2j + 2), contiguous.
    AllGatherResult r = IssueAllGather(params, layout, DType::kFloat32, info.shard_group());
    FinishAllGather(r, params, layout);
    Tensor piece = Full({6}, -1.0, DType::kFloat32);
    c.CopyUnshardedChunkInto(1, piece, 1);
    EXPECT_EQ(piece.ToVector<float>(), (std::vector<float>{-1, 3, 4, 7, 8, -1}));

    // Gradients: rank j's block gets columns [2j, 2j + 2) of c's gradient; the reduce-scatter averages.
    NoGradGuard no_grad;
    const float s = rank == 0 ? 1.0f : 3.0f;
    const Tensor ga = Full({3, 2}, s, DType::kFloat32);
    const Tensor gc = FromVector<float>({s * 1, s * 2, s * 3, s * 4, s * 5, s * 6, s * 7, s * 8}, {2, 4});
    Tensor input = Full({16}, -1.0, DType::kFloat32);
    params[0]->FoldGradInto(ga, input, 0, 8, /*accumulate=*/false);
    c.FoldGradInto(gc, input, 4, 8, false);
    EXPECT_EQ(input.ToVector<float>(), (std::vector<float>{s, s, s, s, s * 1, s * 2, s * 5, s * 6,  //
                                                           s, s, 0, 0, s * 3, s * 4, s * 7, s * 8}));
    c.FoldGradInto(gc, input, 4, 8, /*accumulate=*/true);  // gradient accumulation adds the same slices
    EXPECT_EQ(input.ToVector<float>()[13], s * 8);
    EXPECT_EQ(input.ToVector<float>()[15], s * 16);
    const ReduceSpec spec{.dtype = DType::kFloat32, .divide_factor = std::nullopt, .shard_group = info.shard_group(),
                          .replicate_group = nullptr};
    ReduceScatterResult rs =
        IssueReduceScatter(input, {.params = params, .offsets = layout.offsets, .block_numel = 8}, spec);
    FinishReduceScatter(rs, spec);
    const Tensor grad_c = c.sharded_param().grad();
    ASSERT_TRUE(grad_c.is_distributed());
    EXPECT_EQ(dtensor::PlacementsToString(dtensor::DTensor(grad_c).placements()), "[S(1)]");
    // Averages of s and 3s times the (twice-folded) gradient: 2 * gc' with gc' = gc, 2 gc on the accumulated slots.
    EXPECT_EQ(dtensor::DTensor(grad_c).ToLocal().ToVector<float>(),
              rank == 0 ? std::vector<float>({4, 8, 20, 24}) : std::vector<float>({12, 16, 28, 32}));
  });
}

}  // namespace
}  // namespace tessel::fsdp
