// core/base/stream_copy.cc — 128-byte unrolled AVX2 loads + streaming stores; memcpy for the unaligned
// head and the tail.
#include "core/base/stream_copy.h"

#include <algorithm>
#include <cstring>

#ifdef __AVX2__
#include <immintrin.h>
#endif

namespace tessel {

void StreamCopyNoFence(void* dst_raw, const void* src_raw, int64_t nbytes) {
  char* dst = static_cast<char*>(dst_raw);
  const char* src = static_cast<const char*>(src_raw);
  if (nbytes <= 0 || dst == src) return;
  int64_t i = 0;
#ifdef __AVX2__
  // Align the destination to 32 bytes (streaming stores need it); the loads may stay unaligned.
  i = std::min<int64_t>((32 - (reinterpret_cast<uintptr_t>(dst) & 31)) & 31, nbytes);
  std::memcpy(dst, src, static_cast<size_t>(i));
  for (; i + 128 <= nbytes; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  for (; i + 32 <= nbytes; i += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
  }
#endif
  std::memcpy(dst + i, src + i, static_cast<size_t>(nbytes - i));
}

void StreamFence() {
#ifdef __AVX2__
  _mm_sfence();
#endif
}

void StreamCopy(void* dst, const void* src, int64_t nbytes) {
  if (nbytes <= 0 || dst == src) return;
  if (nbytes < kStreamCopyMinBytes) {
    std::memcpy(dst, src, static_cast<size_t>(nbytes));
    return;
  }
  StreamCopyNoFence(dst, src, nbytes);
  StreamFence();
}

}  // namespace tessel
