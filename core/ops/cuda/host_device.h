// core/ops/cuda/host_device.h — TESSEL_HOST_DEVICE: marks functions shared by CUDA kernels and host
// code (host tests check the same index math the kernels run). Plain C++ under g++.
//
// Invariant: headers using it include no CUDA header and stay valid C++20 for g++, so their math is
// compiled and tested on machines without a CUDA toolkit.
//
// Example:
//   TESSEL_HOST_DEVICE inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
#pragma once

#ifdef __CUDACC__
#define TESSEL_HOST_DEVICE __host__ __device__
#else
#define TESSEL_HOST_DEVICE
#endif
