// pipelining/dependencies.h — the data dependencies between compute actions, in one place for the
// schedule padding, the lowering passes, the verifier and the simulator.
//
//   F(s, m)        needs F(s-1, m)                       (nothing for s == 0)
//   B(s, m), I(s,m) need F(s, m) and B(s+1, m) or I(s+1, m) (only F(s, m) for the last stage)
//   W(s, m)        needs I(s, m)
//
// Invariant: each inner list is a set of alternatives (any one of them completing satisfies it); the outer
// list is a conjunction. Comm, UNSHARD/RESHARD and REDUCE_GRAD actions have no data dependencies here: the
// lowering passes and the verifier handle their ordering.
//
// Example:
//   DataDependencies(I(1, 0), /*num_stages=*/4) == {{F(1,0)}, {B(2,0), I(2,0)}}
#pragma once

#include <vector>

#include "pipelining/action.h"

namespace tessel::pipelining {

std::vector<std::vector<Action>> DataDependencies(const Action& a, int num_stages);

}  // namespace tessel::pipelining
