// fsdp/plan_main.cc — `bazel run //fsdp:plan`: the per-rank, per-ledger memory plan of a GPT trained
// with fully_shard (fsdp/memory_plan.h), before running anything big.
// Usage: bazel run //fsdp:plan -- [--nproc=4] [--batch=16 (global)] [--seq=64] [--d_model=128]
//        [--layers=4] [--heads=4] [--vocab=256] [--mlp=gelu|swiglu] [--norm=layernorm|rmsnorm]
//        [--activations=BYTES (skip measuring them with one unsharded step on the local batch)]
#include <cstdio>
#include <map>
#include <string>

#include "core/base/error.h"
#include "fsdp/memory_plan.h"

int main(int argc, char** argv) {
  using namespace tessel;
  std::map<std::string, std::string> f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos) {
      std::fprintf(stderr, "plan: expected --name=value, got '%s'\n", a.c_str());
      return 2;
    }
    f[a.substr(2, eq - 2)] = a.substr(eq + 1);
  }
  auto num = [&](const char* k, int64_t d) { return f.count(k) ? std::stoll(f.at(k)) : d; };
  try {
    const int64_t world = num("nproc", 4), batch = num("batch", 16);
    TESSEL_CHECK(world >= 1 && batch % world == 0, "plan: --batch=", batch, " must be divisible by --nproc=", world);
    nn::GPTConfig cfg{.vocab_size = num("vocab", 256), .d_model = num("d_model", 128), .n_layers = num("layers", 4),
                      .n_heads = num("heads", 4), .seq_len = num("seq", 64)};
    if (f.count("mlp")) cfg.mlp = f.at("mlp");
    if (f.count("norm")) cfg.norm = f.at("norm");
    const bool measured = !f.count("activations");
    const int64_t activations = measured ? fsdp::MeasureGptActivations(cfg, batch / world) : num("activations", 0);
    std::printf("memory plan: GPT %lld params (d_model %lld, %lld layers, seq %lld), fully_shard per block + root, "
                "fp32, AdamW, %lld ranks, local batch %lld; activations %s\n",
                static_cast<long long>(cfg.NumParameters()), static_cast<long long>(cfg.d_model),
                static_cast<long long>(cfg.n_layers), static_cast<long long>(cfg.seq_len),
                static_cast<long long>(world), static_cast<long long>(batch / world),
                measured ? "measured (one unsharded step)" : "given");
    std::printf("rank 0 (peak bytes per ledger):\n%s", fsdp::FormatPlan(fsdp::PlanGptFullyShard(cfg, world, 0, activations)).c_str());
    std::printf("total per rank:");
    for (int64_t r = 0; r < world; ++r) {
      std::printf(" %lld", static_cast<long long>(fsdp::PlanGptFullyShard(cfg, world, r, activations).total));
    }
    std::printf("\n");
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
