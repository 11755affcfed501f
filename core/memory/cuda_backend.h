// core/memory/cuda_backend.h — the CUDA runtime as a DeviceBackend (built only when the toolkit is
// present: //core/memory:cuda_backend is skipped otherwise).
//
// Invariant: InstallCudaBackend() installs the backend at most once per process and only when
// cudaGetDeviceCount reports at least one device; any failed runtime call throws tessel::Error naming
// the call and cudaGetErrorString (out-of-memory from cudaMalloc/cudaMallocHost returns nullptr
// instead, so the caching allocator can free its cache and retry). Compiled with nvcc 13 for
// sm_90a; run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
//
// Example:
//   if (memory::InstallCudaBackend()) { Tensor g = Ones({4}).To(Device::Cuda(0)); }
#pragma once

namespace tessel::memory {

// Number of CUDA devices; 0 when there is no GPU or no usable driver (clears the runtime error).
int CudaDeviceCount();
// Installs the CUDA backend if there is a device (idempotent). Returns whether it is installed.
bool InstallCudaBackend();

}  // namespace tessel::memory
