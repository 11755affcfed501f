// core/memory/cuda_probe.cc — `cuda_probe`: prints what the CUDA runtime sees (runtime and driver
// versions, device count or the exact error, each device's name, compute capability and memory), so a
// GPU session can tell "no GPU" from "driver too old for this runtime". Exit 0 with >= 1 device, else 1.
#include <cuda_runtime.h>

#include <cstdio>

int main() {
  int runtime = 0, driver = 0, n = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  const cudaError_t e = cudaGetDeviceCount(&n);
  std::printf("cuda_probe: runtime %d driver %d cudaGetDeviceCount -> %d (%s), devices %d\n", runtime, driver,
              static_cast<int>(e), cudaGetErrorString(e), e == cudaSuccess ? n : 0);
  if (e != cudaSuccess) return 1;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    cudaGetDeviceProperties(&p, i);
    std::printf("cuda_probe: cuda:%d %s sm_%d%d %.1f GiB, %d SMs\n", i, p.name, p.major, p.minor,
                p.totalGlobalMem / 1073741824.0, p.multiProcessorCount);
  }
  return n > 0 ? 0 : 1;
}
