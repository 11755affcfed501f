// comm/cached_subgroup_test.cc — ProcessGroup::CachedSubgroup on the threads backend: one creation per key
// and rank, reuse, separate keys, and the cached group's lifetime bound to its parent's.
#include <gtest/gtest.h>

#include <memory>

#include "comm/backends/threads.h"
#include "core/tensor/factory.h"

namespace tessel::comm {
namespace {

TEST(CachedSubgroupTest, CreatesOncePerKeyAndLivesAsLongAsItsParent) {
  RunRanks(4, [](ProcessGroupPtr world) {
    ProcessGroupPtr parent = world->NewGroup({0, 1, 2, 3});
    int made = 0;
    auto pairs = [&] {  // [0, 1] and [2, 3]: every member makes both, in order
      ++made;
      ProcessGroupPtr low = parent->NewGroup({0, 1}), high = parent->NewGroup({2, 3});
      return low ? low : high;
    };
    ProcessGroupPtr a = parent->CachedSubgroup("pairs", pairs);
    ProcessGroupPtr b = parent->CachedSubgroup("pairs", pairs);
    EXPECT_EQ(made, 1);
    EXPECT_EQ(a, b);
    const int first = world->rank() / 2 * 2;
    EXPECT_EQ(a->global_ranks(), (std::vector<int>{first, first + 1}));
    Tensor t = Full({1}, static_cast<double>(world->rank()));
    a->AllReduce(t, ReduceOp::kSum)->Wait();
    EXPECT_EQ(t.item<double>(), 2 * first + 1);
    ProcessGroupPtr other = parent->CachedSubgroup("pairs again", pairs);
    EXPECT_EQ(made, 2);
    EXPECT_NE(other, a);
    std::weak_ptr<ProcessGroup> cached = a;
    a.reset(), b.reset(), other.reset();
    EXPECT_FALSE(cached.expired());  // the parent keeps it
    world->Barrier()->Wait();        // no rank destroys `parent` while another still uses it
    parent.reset();
    EXPECT_TRUE(cached.expired());
  });
}

}  // namespace
}  // namespace tessel::comm
