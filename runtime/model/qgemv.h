// What the native kernels' files share (runtime/model/qgemv.c, qgemv_rows.c): small vector
// helpers and the row-wise kernels a whole decode step calls.

#ifndef RADIXGEN_QGEMV_H
#define RADIXGEN_QGEMV_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// The sum of a vector's 8 lanes.
static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// x rounded to bf16, to nearest even (as torch casts and vcvtneps2bf16 rounds); NaN stays NaN.
static inline uint16_t to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if (isnan(x)) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

// qgemv_rows.c
void rms_norm(const float *x, int64_t stride, const float *w, int64_t rows, int64_t dim,
              float eps, float *out, int threads);
void rotary_inplace(float *qkv, int64_t stride, int64_t rows, int64_t heads, int64_t dim,
                    const int64_t *positions, const float *cos_table, const float *sin_table,
                    int threads);
void decode_attention(const float *q, int64_t q_stride, const void *k, const void *v,
                      int64_t pool_slots, const int64_t *slots, int64_t lmax,
                      const int64_t *lens, int64_t batch, int64_t heads, int64_t kv_heads,
                      int64_t dim, float scale, float *out, int threads, int bf16);
void write_kv(const float *rows, int64_t stride, int64_t tokens, int64_t kv_heads, int64_t dim,
              const int64_t *slots, int64_t pool_slots, void *pool, int bf16, int threads);
void silu_mul(const float *x, int64_t rows, int64_t inter, float *out, int threads);

#endif
