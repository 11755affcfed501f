// core/ops/vector_isa.h — internal to core/ops: which vector ISA the hand-written float32 kernels run
// (attention_kernels.h, pointwise_kernels.h), chosen once from cpuid and overridable by tests.
//
// Invariant: ActiveVectorIsa() is kAvx512 only when the CPU reports AVX-512 F, VL, DQ and BW (every
// extension any *_avx512.cc file is compiled with) and the OS saves the zmm state; otherwise kAvx2, the
// build's x86-64-v3 baseline. So one binary runs on AVX2-only CPUs, and a test can run the AVX2 kernels
// on an AVX-512 machine, so CI on either machine kind covers both.
//
// Example:
//   ForceVectorIsaForTesting(VectorIsa::kAvx2);   // every per-ISA kernel family takes its AVX2 copy
//   ...
//   ForceVectorIsaForTesting(VectorIsa::kAuto);   // back to cpuid's choice
#pragma once

namespace tessel {

enum class VectorIsa { kAuto, kAvx2, kAvx512 };

// True when the CPU and the OS support the AVX-512 registers and extensions the avx512 variants use.
bool CpuHasAvx512();

// Test-only: pins the variant every per-ISA kernel family uses (kAuto restores cpuid's choice).
// Forcing kAvx512 on a CPU without it throws kFailedPrecondition.
void ForceVectorIsaForTesting(VectorIsa isa);

// kAvx512 or kAvx2: the forced one, else cpuid's.
VectorIsa ActiveVectorIsa();

}  // namespace tessel
