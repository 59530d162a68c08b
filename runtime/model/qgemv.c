// Weight-only quantized matrix products for the few rows of a decode step (AVX2 + FMA).
//
// y[r, n] = sum_k x[r, k] * w[n, k] with w kept quantized:
//   int4: w = q * d[n, g] + m[n, g], q in [0, 15], groups of 32 along k, two codes a byte in
//         GGUF's layout (half the bytes of one code a byte: decode reads the weights once a step);
//   int8: w = q * d[n, g], q in [-128, 127], groups of 32 along k.
// x is first rounded to int16 per group of 32 (xq * xs; llama.cpp rounds to int8 instead, which
// cost 0.8% perplexity here), so each group is one exact integer dot product; the m term uses
// the float sum of the group.
// Built (with qgemv_avx512.c and qgemv_bf16.c) by runtime/model/qgemv.py with gcc -O3 -mavx2
// -mfma -fopenmp.

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define GROUP 32

// x [rows, k] float -> xq [rows, k] int16, xs and xsum [rows, k / 32].
void quantize_rows(const float *x, int64_t rows, int64_t k, int16_t *xq, float *xs, float *xsum) {
  int64_t groups = k / GROUP;
  for (int64_t i = 0; i < rows * groups; i++) {
    const float *v = x + i * GROUP;
    float amax = 0.0f, sum = 0.0f;
    for (int j = 0; j < GROUP; j++) {
      float a = fabsf(v[j]);
      amax = a > amax ? a : amax;
      sum += v[j];
    }
    float scale = amax / 32767.0f;
    float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (int j = 0; j < GROUP; j++) xq[i * GROUP + j] = (int16_t)lrintf(v[j] * inv);
    xs[i] = scale;
    xsum[i] = sum;
  }
}

static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// sum_j a[j] * b[j] over a row's group terms (the m * sum(x) part of int4).
static inline float dot_groups(const float *a, const float *b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), acc);
  float sum = hsum(acc);
  for (; j < n; j++) sum += a[j] * b[j];
  return sum;
}

// Integer dot product of 32 codes (two halves of 16, as int16) with 32 int16 activations, as
// 8 int32 lanes (|sum| < 2^31: at most 32 * 127 * 32767).
static inline __m256i dot32(__m256i w0, __m256i w1, const int16_t *x) {
  __m256i a = _mm256_madd_epi16(w0, _mm256_loadu_si256((const __m256i *)x));
  __m256i b = _mm256_madd_epi16(w1, _mm256_loadu_si256((const __m256i *)(x + 16)));
  return _mm256_add_epi32(a, b);
}

// The codes of group g of a row as two vectors of 16 int16 (elements 0-15 and 16-31): byte j
// of a group's 16 holds element j in its low nibble and element j + 16 in its high one.
static inline void unpack_group(const uint8_t *qo, int64_t g, __m256i *w0, __m256i *w1) {
  __m128i b = _mm_loadu_si128((const __m128i *)(qo + g * 16)), low = _mm_set1_epi8(15);
  *w0 = _mm256_cvtepu8_epi16(_mm_and_si128(b, low));
  *w1 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(b, 4), low));
}

// One weight row against `R` activation rows: each group's codes are unpacked once for all;
// groups go two at a time into two accumulators per row, which keeps the FMA chains short.
static inline __attribute__((always_inline)) void int4_row(
    const uint8_t *qo, const float *dd, const float *mm, int64_t groups, int64_t k,
    const int16_t *xq, const float *xs, const float *xsum, int64_t n, float *y, const int R) {
  __m256 even[4], odd[4];
  for (int r = 0; r < R; r++) even[r] = odd[r] = _mm256_setzero_ps();
  int64_t g = 0;
  for (; g + 1 < groups; g += 2) {
    __m256i a0, a1, b0, b1;
    unpack_group(qo, g, &a0, &a1);
    unpack_group(qo, g + 1, &b0, &b1);
    for (int r = 0; r < R; r++) {
      const int16_t *x = xq + r * k + g * GROUP;
      const float *s = xs + r * groups + g;
      __m256 p = _mm256_cvtepi32_ps(dot32(a0, a1, x));
      __m256 q = _mm256_cvtepi32_ps(dot32(b0, b1, x + GROUP));
      even[r] = _mm256_fmadd_ps(_mm256_set1_ps(dd[g] * s[0]), p, even[r]);
      odd[r] = _mm256_fmadd_ps(_mm256_set1_ps(dd[g + 1] * s[1]), q, odd[r]);
    }
  }
  if (g < groups) {
    __m256i a0, a1;
    unpack_group(qo, g, &a0, &a1);
    for (int r = 0; r < R; r++) {
      __m256 p = _mm256_cvtepi32_ps(dot32(a0, a1, xq + r * k + g * GROUP));
      even[r] = _mm256_fmadd_ps(_mm256_set1_ps(dd[g] * xs[r * groups + g]), p, even[r]);
    }
  }
  for (int r = 0; r < R; r++)
    y[r * n] = hsum(_mm256_add_ps(even[r], odd[r])) + dot_groups(mm, xsum + r * groups, groups);
}

static void int4_matmul_avx2(const uint8_t *q, const float *d, const float *m, int64_t n,
                             int64_t k, const int16_t *xq, const float *xs, const float *xsum,
                             int64_t rows, float *y, int threads) {
  int64_t groups = k / GROUP;
  // static: each thread streams one contiguous part of the weight, which the prefetchers
  // follow (in chunks of 32 rows taken in turn, the int8 LM head read 1.6x slower at one row)
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t o = 0; o < n; o++) {
    const uint8_t *qo = q + o * (k / 2);
    const float *dd = d + o * groups, *mm = m + o * groups;
    for (int64_t r = 0; r < rows; r += 4) {
      const int16_t *x = xq + r * k;
      const float *s = xs + r * groups, *sum = xsum + r * groups;
      float *out = y + r * n + o;
      switch (rows - r < 4 ? rows - r : 4) {
        case 1: int4_row(qo, dd, mm, groups, k, x, s, sum, n, out, 1); break;
        case 2: int4_row(qo, dd, mm, groups, k, x, s, sum, n, out, 2); break;
        case 3: int4_row(qo, dd, mm, groups, k, x, s, sum, n, out, 3); break;
        default: int4_row(qo, dd, mm, groups, k, x, s, sum, n, out, 4); break;
      }
    }
  }
}

static inline __attribute__((always_inline)) void int8_row(
    const int8_t *qo, const float *dd, int64_t groups, int64_t k, const int16_t *xq,
    const float *xs, int64_t n, float *y, const int R) {
  __m256 acc[4];
  for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; g++) {
    __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qo + g * GROUP)));
    __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qo + g * GROUP + 16)));
    for (int r = 0; r < R; r++) {
      __m256 p = _mm256_cvtepi32_ps(dot32(w0, w1, xq + r * k + g * GROUP));
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dd[g] * xs[r * groups + g]), p, acc[r]);
    }
  }
  for (int r = 0; r < R; r++) y[r * n] = hsum(acc[r]);
}

// int8 codes with one scale per group of 32 of each row (d [n, k / 32]).
static void int8_matmul_avx2(const int8_t *q, const float *d, int64_t n, int64_t k,
                             const int16_t *xq, const float *xs, int64_t rows, float *y,
                             int threads) {
  int64_t groups = k / GROUP;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t o = 0; o < n; o++) {
    const int8_t *qo = q + o * k;
    const float *dd = d + o * groups;
    for (int64_t r = 0; r < rows; r += 4) {
      const int16_t *x = xq + r * k;
      const float *sc = xs + r * groups;
      float *out = y + r * n + o;
      switch (rows - r < 4 ? rows - r : 4) {
        case 1: int8_row(qo, dd, groups, k, x, sc, n, out, 1); break;
        case 2: int8_row(qo, dd, groups, k, x, sc, n, out, 2); break;
        case 3: int8_row(qo, dd, groups, k, x, sc, n, out, 3); break;
        default: int8_row(qo, dd, groups, k, x, sc, n, out, 4); break;
      }
    }
  }
}

// The AVX-512 VNNI kernels (qgemv_avx512.c) take the int4 products of at least int4_rows rows
// and the int8 ones of at least int8_rows; 0 (the default, and on CPUs without avx512_vnni)
// keeps those on the AVX2 kernels.
static int avx512_int4_rows = 0, avx512_int8_rows = 0;
void set_avx512(int int4_rows, int int8_rows) {
  avx512_int4_rows = int4_rows, avx512_int8_rows = int8_rows;
}
void int4_matmul_avx512(const uint8_t *q, const float *d, const float *m, int64_t n, int64_t k,
                        const int16_t *xq, const float *xs, const float *xsum, int64_t rows,
                        float *y, int threads);
void int8_matmul_avx512(const int8_t *q, const float *d, int64_t n, int64_t k, const int16_t *xq,
                        const float *xs, int64_t rows, float *y, int threads);

void int4_matmul(const uint8_t *q, const float *d, const float *m, int64_t n, int64_t k,
                 const int16_t *xq, const float *xs, const float *xsum, int64_t rows, float *y,
                 int threads) {
  if (avx512_int4_rows && rows >= avx512_int4_rows)
    int4_matmul_avx512(q, d, m, n, k, xq, xs, xsum, rows, y, threads);
  else
    int4_matmul_avx2(q, d, m, n, k, xq, xs, xsum, rows, y, threads);
}

void int8_matmul(const int8_t *q, const float *d, int64_t n, int64_t k, const int16_t *xq,
                 const float *xs, int64_t rows, float *y, int threads) {
  if (avx512_int8_rows && rows >= avx512_int8_rows)
    int8_matmul_avx512(q, d, n, k, xq, xs, rows, y, threads);
  else
    int8_matmul_avx2(q, d, n, k, xq, xs, rows, y, threads);
}

// The float weight, for the dense GEMM of long extends: out [n, k].
void int4_dequantize(const uint8_t *q, const float *d, const float *m, int64_t n, int64_t k,
                     float *out, int threads) {
  int64_t groups = k / GROUP;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n * groups; i++) {
    __m256i w[2];
    unpack_group(q, i, &w[0], &w[1]);  // 2 x 16 int16 codes
    __m256 scale = _mm256_set1_ps(d[i]), offset = _mm256_set1_ps(m[i]);
    for (int h = 0; h < 2; h++)
      for (int e = 0; e < 2; e++) {
        __m128i part = e ? _mm256_extracti128_si256(w[h], 1) : _mm256_castsi256_si128(w[h]);
        __m256 codes = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(part));
        _mm256_storeu_ps(out + i * GROUP + h * 16 + e * 8, _mm256_fmadd_ps(codes, scale, offset));
      }
  }
}

void int8_dequantize(const int8_t *q, const float *d, int64_t n, int64_t k, float *out,
                     int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t o = 0; o < n; o++)
    for (int64_t j = 0; j < k; j++)
      out[o * k + j] = (float)q[o * k + j] * d[o * (k / GROUP) + j / GROUP];
}

// The row-wise kernels below (norms, rotary, KV writes, SiLU) split their rows between
// `threads` from this many rows on; fewer run on the caller. A 16-row decode step, SmolLM2,
// 2 threads: their ~2 ms a step in one thread is ~1.4 ms (from 128: the same, one thread);
// a 2,048-token prefill: ~0.33 s in one thread, ~0.18 s in two.
#define PARALLEL_ROWS 8

// RMSNorm of each row of x [rows, dim] (row stride `stride`), times w: out [rows, dim].
void rms_norm(const float *x, int64_t stride, const float *w, int64_t rows, int64_t dim,
              float eps, float *out, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (rows >= PARALLEL_ROWS)
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * stride;
    float sum = 0.0f;
    for (int64_t j = 0; j < dim; j++) sum += xr[j] * xr[j];
    float inv = 1.0f / sqrtf(sum / (float)dim + eps);
    for (int64_t j = 0; j < dim; j++) out[r * dim + j] = xr[j] * inv * w[j];
  }
}

// Rotary embedding in place, half-split layout, on the q heads then the k heads of each row of
// a fused qkv projection (row stride `stride`); cos/sin tables [positions, dim].
void rotary_inplace(float *qkv, int64_t stride, int64_t rows, int64_t heads, int64_t dim,
                    const int64_t *positions, const float *cos_table, const float *sin_table,
                    int threads) {
  int64_t half = dim / 2;
#pragma omp parallel for num_threads(threads) schedule(static) if (rows >= PARALLEL_ROWS)
  for (int64_t r = 0; r < rows; r++) {
    const float *c = cos_table + positions[r] * dim, *s = sin_table + positions[r] * dim;
    for (int64_t h = 0; h < heads; h++) {
      float *x = qkv + r * stride + h * dim;
      for (int64_t i = 0; i < half; i++) {
        float a = x[i], b = x[i + half];
        x[i] = a * c[i] - b * s[i];
        x[i + half] = b * c[i + half] + a * s[i + half];
      }
    }
  }
}

// e^x for 8 floats: 2^n e^r with n = round(x / ln 2) and r = x - n ln 2 (ln 2 in two parts),
// e^r by its Taylor series to r^6 (|r| <= ln 2 / 2: under 3e-7 relative). 2^n is built as
// 2^(n - 1) * 2, which keeps n = 128 (x up to ln FLT_MAX) inside the exponent field. Past the
// float range e^x is +inf above and 0 below (flushed from e^-86.5, 2.6e-38); NaN stays NaN.
static inline __m256 exp8(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.72283f), lo = _mm256_set1_ps(-86.5f);
  __m256 c = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(c, _mm256_set1_ps(1.44269504f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), c);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  static const float terms[] = {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
  for (int i = 0; i < 6; i++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(terms[i]));
  __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(126));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23))),
                           _mm256_set1_ps(2.0f));
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
  y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// v[i] = e^(v[i] - top) for i < len; returns their sum.
static float exp_shifted(float *v, int64_t len, float top) {
  __m256 t = _mm256_set1_ps(top), acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= len; i += 8) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(v + i), t));
    _mm256_storeu_ps(v + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float total = hsum(acc);
  for (; i < len; i++) total += (v[i] = expf(v[i] - top));
  return total;
}

// x rounded to bf16, to nearest even (as torch casts and vcvtneps2bf16 rounds); NaN stays NaN.
static inline uint16_t to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if (isnan(x)) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

// The address of value `index` of a pool (float32, or bf16 with `bf16`).
static inline const void *kv_row(const void *pool, int64_t index, int bf16) {
  return (const char *)pool + index * (bf16 ? 2 : 4);
}
// A pool row of dim values as floats: in place for float32, else widened into `buf` once
// (every query head of the group then reads it).
static inline const float *row_floats(const void *row, int64_t dim, float *buf, int bf16) {
  if (!bf16) return (const float *)row;
  for (int64_t i = 0; i < dim; i += 8) {
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + i));
    __m256i widened = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(buf + i, _mm256_castsi256_ps(widened));
  }
  return buf;
}

#define KEYS 8  // cached rows attended to at once

// Lane t: the sum of the lanes of a[t] (8 horizontal sums in 10 instructions, not 40).
static inline __m256 hsum8(const __m256 a[8]) {
  __m256 s0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  __m256 s1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  // s0: the partial sums of a[0..3], low halves' then high halves'; s1 those of a[4..7]
  return _mm256_add_ps(_mm256_permute2f128_ps(s0, s1, 0x20), _mm256_permute2f128_ps(s0, s1, 0x31));
}

// scores[t] = scale * (q . k[t]) for the KEYS rows k (dim floats each).
static inline __m256 dot_keys(const float *q, const float *const k[KEYS], int64_t dim,
                              __m256 scale) {
  __m256 acc[KEYS];
#pragma GCC unroll 8
  for (int t = 0; t < KEYS; t++) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < dim; i += 8) {
    __m256 qv = _mm256_loadu_ps(q + i);
#pragma GCC unroll 8
    for (int t = 0; t < KEYS; t++) acc[t] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[t] + i), acc[t]);
  }
  return _mm256_mul_ps(hsum8(acc), scale);
}

// o[0..8U) += sum over t < n of p[t] * v[t][0..8U), the U vectors of o held in registers.
#define ADD_ROWS(U)                                                                     \
  static inline void add_rows_##U(float *o, const float *p, const float *const *v,     \
                                  int n) {                                              \
    __m256 acc[U];                                                                      \
    _Pragma("GCC unroll 8") for (int u = 0; u < U; u++) acc[u] = _mm256_loadu_ps(o + 8 * u); \
    for (int t = 0; t < n; t++) {                                                       \
      __m256 pt = _mm256_set1_ps(p[t]);                                                 \
      _Pragma("GCC unroll 8") for (int u = 0; u < U; u++)                               \
          acc[u] = _mm256_fmadd_ps(pt, _mm256_loadu_ps(v[t] + 8 * u), acc[u]);          \
    }                                                                                   \
    _Pragma("GCC unroll 8") for (int u = 0; u < U; u++) _mm256_storeu_ps(o + 8 * u, acc[u]); \
  }
ADD_ROWS(8)
ADD_ROWS(1)

// Attention of one new token per request over its cached tokens, read in place from the
// head-major pool (k, v: [kv_heads, pool_slots, dim], float32, or bf16 with `bf16`); slots
// [batch, lmax] lists each request's KV slots, of which the first lens[b] count. q: [batch,
// heads, dim] rows of stride q_stride; out: [batch, heads, dim]. dim must be a multiple of 8.
// The query heads sharing a KV head go through each cached row together, so K and V are read
// once per request (bf16 rows widened once), KEYS rows at a time: their scores are 8 dot
// products summed across lanes in one go, and each head's output accumulates in registers
// over them (64 dims at a time).
void decode_attention(const float *q, int64_t q_stride, const void *k, const void *v,
                      int64_t pool_slots, const int64_t *slots, int64_t lmax,
                      const int64_t *lens, int64_t batch, int64_t heads, int64_t kv_heads,
                      int64_t dim, float scale, float *out, int threads, int bf16) {
  int64_t group = heads / kv_heads;
  const __m256 scale8 = _mm256_set1_ps(scale);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t pair = 0; pair < batch * kv_heads; pair++) {
    int64_t b = pair / kv_heads, h = pair % kv_heads, len = lens[b];
    const int64_t *s = slots + b * lmax;
    const void *kh = kv_row(k, h * pool_slots * dim, bf16);
    const void *vh = kv_row(v, h * pool_slots * dim, bf16);
    const float *qh = q + b * q_stride + h * group * dim;
    float *scores = (float *)malloc(sizeof(float) * (group * len + KEYS * dim + KEYS));
    float *rows = scores + group * len;  // KEYS bf16 rows as floats
    float *o = out + (b * heads + h * group) * dim;  // the group's heads, one after another
    const float *r[KEYS];
    for (int64_t j0 = 0; j0 < len; j0 += KEYS) {
      int n = len - j0 < KEYS ? (int)(len - j0) : KEYS;
      for (int t = 0; t < KEYS; t++)  // past the last row: the first again, its score unused
        r[t] = t < n ? row_floats(kv_row(kh, s[j0 + t] * dim, bf16), dim, rows + t * dim, bf16)
                     : r[0];
      for (int64_t g = 0; g < group; g++) {
        __m256 sc = dot_keys(qh + g * dim, r, dim, scale8);
        if (n == KEYS) {
          _mm256_storeu_ps(scores + g * len + j0, sc);
        } else {
          float lane[KEYS];
          _mm256_storeu_ps(lane, sc);
          memcpy(scores + g * len + j0, lane, sizeof(float) * n);
        }
      }
    }
    for (int64_t g = 0; g < group; g++) {
      float *sg = scores + g * len, top = -INFINITY;
      for (int64_t j = 0; j < len; j++) top = sg[j] > top ? sg[j] : top;
      float inv = 1.0f / exp_shifted(sg, len, top);
      for (int64_t j = 0; j < len; j++) sg[j] *= inv;
    }
    memset(o, 0, sizeof(float) * group * dim);
    for (int64_t j0 = 0; j0 < len; j0 += KEYS) {
      int n = len - j0 < KEYS ? (int)(len - j0) : KEYS;
      for (int t = 0; t < n; t++)
        r[t] = row_floats(kv_row(vh, s[j0 + t] * dim, bf16), dim, rows + t * dim, bf16);
      for (int64_t g = 0; g < group; g++) {
        const float *p = scores + g * len + j0;
        int64_t c = 0;
        for (; c + 64 <= dim; c += 64) {
          const float *vc[KEYS];
          for (int t = 0; t < n; t++) vc[t] = r[t] + c;
          add_rows_8(o + g * dim + c, p, vc, n);
        }
        for (; c < dim; c += 8) {
          const float *vc[KEYS];
          for (int t = 0; t < n; t++) vc[t] = r[t] + c;
          add_rows_1(o + g * dim + c, p, vc, n);
        }
      }
    }
    free(scores);
  }
}

// k/v rows [tokens, kv_heads, dim] (row stride `stride`) into the head-major pool at `slots`
// (float32, or bf16 with `bf16`: rounded to nearest even, as torch casts).
void write_kv(const float *rows, int64_t stride, int64_t tokens, int64_t kv_heads, int64_t dim,
              const int64_t *slots, int64_t pool_slots, void *pool, int bf16, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (tokens >= PARALLEL_ROWS)
  for (int64_t t = 0; t < tokens; t++)
    for (int64_t h = 0; h < kv_heads; h++) {
      const float *x = rows + t * stride + h * dim;
      int64_t at = (h * pool_slots + slots[t]) * dim;
      if (!bf16) {
        memcpy((float *)pool + at, x, sizeof(float) * dim);
        continue;
      }
      uint16_t *out = (uint16_t *)pool + at;
      for (int64_t i = 0; i < dim; i++) out[i] = to_bf16(x[i]);
    }
}

// silu(gate) * up for rows of [gate | up] (width 2 * inter): out [rows, inter].
void silu_mul(const float *x, int64_t rows, int64_t inter, float *out, int threads) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
#pragma omp parallel for num_threads(threads) schedule(static) if (rows >= PARALLEL_ROWS)
  for (int64_t r = 0; r < rows; r++) {
    const float *gate = x + r * 2 * inter, *up = gate + inter;
    float *o = out + r * inter;
    int64_t i = 0;
    for (; i + 8 <= inter; i += 8) {
      __m256 g = _mm256_loadu_ps(gate + i);
      __m256 d = _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, g)));
      _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_div_ps(g, d), _mm256_loadu_ps(up + i)));
    }
    for (; i < inter; i++) o[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
  }
}

// Greedy picks: out[i] = the index of the largest value of row rows[i] of x (row stride
// `stride`, n values), the first of equal ones, NaN ignored (0 for a row of NaN and -inf), as
// torch.argmax over the row with NaN set to -inf gives, in one pass and no copy.
void argmax_rows(const float *x, int64_t stride, int64_t n, const int64_t *rows, int64_t count,
                 int64_t *out, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (count > 1)
  for (int64_t i = 0; i < count; i++) {
    const float *v = x + rows[i] * stride;
    // four independent chains of 8 lanes (one would wait on each compare); lane l of chain c
    // sees indices 32t + 8c + l and keeps the first index of its largest value
    __m256 best[4];
    __m256i best_at[4], at[4];
    const __m256i step = _mm256_set1_epi32(32);
    for (int c = 0; c < 4; c++) {
      best[c] = _mm256_set1_ps(-INFINITY);
      at[c] = best_at[c] = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                            _mm256_set1_epi32(8 * c));
    }
    int64_t j = 0;
    for (; j + 32 <= n; j += 32)
      for (int c = 0; c < 4; c++) {
        __m256 y = _mm256_loadu_ps(v + j + 8 * c);
        __m256 gt = _mm256_cmp_ps(y, best[c], _CMP_GT_OQ);  // false for NaN
        best[c] = _mm256_blendv_ps(best[c], y, gt);
        best_at[c] = _mm256_castps_si256(_mm256_blendv_ps(
            _mm256_castsi256_ps(best_at[c]), _mm256_castsi256_ps(at[c]), gt));
        at[c] = _mm256_add_epi32(at[c], step);
      }
    float top = -INFINITY;
    int64_t top_at = 0;
    for (int c = 0; c < 4; c++) {
      float lane[8];
      int32_t lane_at[8];
      _mm256_storeu_ps(lane, best[c]);
      _mm256_storeu_si256((__m256i *)lane_at, best_at[c]);
      for (int l = 0; l < 8; l++)  // equal values: the smaller index
        if (lane[l] > top || (lane[l] == top && lane_at[l] < top_at)) {
          top = lane[l];
          top_at = lane_at[l];
        }
    }
    if (top == -INFINITY) top_at = 0;  // every value so far -inf or NaN
    for (; j < n; j++)
      if (v[j] > top) {
        top = v[j];
        top_at = j;
      }
    out[i] = top_at;
  }
}

// The entry points: y [rows, n] = x [rows, k] (float) @ w.T, activations rounded inside.
static int16_t *round_activations(const float *x, int64_t rows, int64_t k, float **xs,
                                  float **xsum) {
  int16_t *xq = (int16_t *)malloc(sizeof(int16_t) * rows * k);
  *xs = (float *)malloc(sizeof(float) * rows * (k / GROUP));
  *xsum = (float *)malloc(sizeof(float) * rows * (k / GROUP));
  quantize_rows(x, rows, k, xq, *xs, *xsum);
  return xq;
}

void int4_linear(const uint8_t *q, const float *d, const float *m, int64_t n, int64_t k,
                 const float *x, int64_t rows, float *y, int threads) {
  float *xs, *xsum;
  int16_t *xq = round_activations(x, rows, k, &xs, &xsum);
  int4_matmul(q, d, m, n, k, xq, xs, xsum, rows, y, threads);
  free(xq), free(xs), free(xsum);
}

void int8_linear(const int8_t *q, const float *s, int64_t n, int64_t k, const float *x,
                 int64_t rows, float *y, int threads) {
  float *xs, *xsum;
  int16_t *xq = round_activations(x, rows, k, &xs, &xsum);
  int8_matmul(q, s, n, k, xq, xs, rows, y, threads);
  free(xq), free(xs), free(xsum);
}

// ---- AMX tiles (Intel Xeon since Sapphire Rapids): bf16 products for batches of many rows ---
// The weight is a dense bf16 copy laid out as AMX B tiles: tile (j, b) holds rows 16j..16j+15
// and columns 32b..32b+31 as [16 column pairs][16 rows][2], 1 KB each, tiles of one row block
// j after another (runtime/model/qgemv.py `bf16_tiles`). Activations are rounded to bf16; each
// tile product accumulates in fp32.

// Asks Linux for the AMX tile state (once per process); 0 when granted.
static int amx_granted = 0;
int amx_enable(void) {
  int refused = (int)syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */);
  amx_granted = !refused;
  return refused;
}

typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config;

// x [rows, k] float -> bf16 (round to nearest even) [padded, k], rows past `rows` zero; every
// CPU with AMX-BF16 has AVX512-BF16's conversion.
__attribute__((target("avx512f,avx512bf16"))) uint16_t *bf16_rows(
    const float *x, int64_t rows, int64_t padded, int64_t k) {
  uint16_t *out = (uint16_t *)malloc(sizeof(uint16_t) * padded * k);
  int64_t i = 0, count = rows * k;
  for (; i + 16 <= count; i += 16)
    _mm256_storeu_si256((__m256i *)(out + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
  for (; i < count; i++) out[i] = to_bf16(x[i]);
  memset(out + count, 0, sizeof(uint16_t) * (padded - rows) * k);
  return out;
}

// Tiles 0 and 1: two 16 x 16 fp32 blocks of y (columns j and j + 1); 2: 16 rows of x; 3 and 4:
// weight tiles j and j + 1. (Blocks of 32 rows by 32 columns on all eight tiles gained nothing
// measurable here.)
__attribute__((target("amx-tile,amx-bf16"))) static void amx_blocks(
    const uint16_t *w, int64_t n, int64_t k, const uint16_t *x, int64_t padded, float *y,
    int threads) {
  int64_t kb = k / 32, nb = n / 16;
#pragma omp parallel num_threads(threads)
  {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 5; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
    _tile_loadconfig(&cfg);
#pragma omp for schedule(dynamic, 1)
    for (int64_t j = 0; j < nb; j += 2) {
      const uint16_t *w0 = w + j * kb * 512, *w1 = w0 + kb * 512;
      float *y0 = y + j * 16, *y1 = y0 + 16;
      int two = j + 1 < nb;
      for (int64_t r = 0; r < padded; r += 16) {
        const uint16_t *xr = x + r * k;
        _tile_zero(0);
        _tile_zero(1);
        for (int64_t b = 0; b < kb; b++) {
          _tile_loadd(2, xr + b * 32, k * 2);
          _tile_loadd(3, w0 + b * 512, 64);
          _tile_dpbf16ps(0, 2, 3);
          if (two) {
            _tile_loadd(4, w1 + b * 512, 64);
            _tile_dpbf16ps(1, 2, 4);
          }
        }
        _tile_stored(0, y0 + r * n, n * 4);
        if (two) _tile_stored(1, y1 + r * n, n * 4);
      }
    }
    _tile_release();
  }
}

// y [rows, n] = x [rows, k] (float) @ w.T over the tiles of w; n a multiple of 16, k of 32.
void amx_linear(const uint16_t *w, int64_t n, int64_t k, const float *x, int64_t rows, float *y,
                int threads) {
  int64_t padded = (rows + 15) / 16 * 16;
  uint16_t *xb = bf16_rows(x, rows, padded, k);
  float *out = padded == rows ? y : (float *)malloc(sizeof(float) * padded * n);
  amx_blocks(w, n, k, xb, padded, out, threads);
  if (out != y) memcpy(y, out, sizeof(float) * rows * n), free(out);
  free(xb);
}

void bf16_linear(const uint16_t *w, int64_t n, int64_t k, const float *x, int64_t rows, float *y,
                 int threads);  // qgemv_bf16.c

// The product on a weight's bf16 tiles: AMX where Linux granted it, else AVX-512 BF16 dot
// products (qgemv.py makes tiles only where one of the two runs).
void tiles_linear(const uint16_t *w, int64_t n, int64_t k, const float *x, int64_t rows,
                  float *y, int threads) {
  if (amx_granted)
    amx_linear(w, n, k, x, rows, y, threads);
  else
    bf16_linear(w, n, k, x, rows, y, threads);
}

// ---- A whole decode step: every layer of a Llama-family decoder in one call ----------------
// For a batch of decode rows (one new token per request) whose linear layers all run on the
// kernels above: removes the per-layer calls and the tensor bookkeeping between them, which
// at batch 1 cost as much as the weights' reads. The layout of these records is mirrored by
// the ctypes structures of runtime/model/decode_step.py.

typedef struct {
  int64_t bits, n, k;  // bits: 4 (groups of 32: q, d, m) or 8 (groups of 32: q, d)
  const void *q;
  const float *d, *m, *bias;  // bias may be NULL
  const uint16_t *tiles;      // the bf16 tiles of the weight (tiles_linear), or NULL
} qlinear;

typedef struct {
  const float *in_norm, *post_norm;
  qlinear qkv, o, gate_up, down;
  void *k_pool, *v_pool;  // head-major [kv_heads, pool_slots, dim], float32 or bf16
} qlayer;

typedef struct {
  int64_t layers, hidden, heads, kv_heads, dim, inter, pool_slots;
  int64_t tile_rows;  // more rows than this run on a layer's bf16 tiles, where it has them
  int64_t kv_bf16;    // the KV pools hold bf16 (else float32)
  float eps;
  const float *cos, *sin, *final_norm;  // rotary tables [positions, dim]
  const qlayer *layer;
} qmodel;

typedef struct {  // per-step scratch, sized for `rows` rows
  int16_t *xq;
  float *xs, *xsum;
} rounding;

static void linear_into(const qlinear *w, const float *x, int64_t rows, int64_t tile_rows,
                        rounding *r, float *y, int threads) {
  if (w->tiles && rows > tile_rows) {
    tiles_linear(w->tiles, w->n, w->k, x, rows, y, threads);
  } else {
    quantize_rows(x, rows, w->k, r->xq, r->xs, r->xsum);
    if (w->bits == 4)
      int4_matmul((const uint8_t *)w->q, w->d, w->m, w->n, w->k, r->xq, r->xs, r->xsum, rows,
                  y, threads);
    else
      int8_matmul((const int8_t *)w->q, w->d, w->n, w->k, r->xq, r->xs, rows, y, threads);
  }
  if (w->bias)
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < w->n; j++) y[i * w->n + j] += w->bias[j];
}

static void add_into(float *h, const float *x, int64_t count) {
  for (int64_t i = 0; i < count; i++) h[i] += x[i];
}

// h [rows, hidden]: the embedded tokens in, the final (normed) hidden states out. Request i
// writes its new K/V at out_loc[i] and attends over slots[i, :lens[i]] (lens counts the new
// token, whose slot is the last one).
void decode_step(const qmodel *m, float *h, int64_t rows, const int64_t *positions,
                 const int64_t *out_loc, const int64_t *slots, int64_t lmax, const int64_t *lens,
                 int threads) {
  int64_t hid = m->hidden, qd = m->heads * m->dim, kvd = m->kv_heads * m->dim;
  int64_t qkv_width = qd + 2 * kvd, widest = hid > m->inter ? hid : m->inter;
  widest = widest > qd ? widest : qd;
  float *xn = malloc(sizeof(float) * rows * hid), *tmp = malloc(sizeof(float) * rows * hid);
  float *qkv = malloc(sizeof(float) * rows * qkv_width), *att = malloc(sizeof(float) * rows * qd);
  float *gu = malloc(sizeof(float) * rows * 2 * m->inter);
  float *act = malloc(sizeof(float) * rows * m->inter);
  int64_t groups = rows * (widest / GROUP);  // one scale and one sum per group of 32
  rounding r = {malloc(sizeof(int16_t) * rows * widest), malloc(sizeof(float) * groups),
                malloc(sizeof(float) * groups)};
  for (int64_t l = 0; l < m->layers; l++) {
    const qlayer *L = m->layer + l;
    rms_norm(h, hid, L->in_norm, rows, hid, m->eps, xn, threads);
    linear_into(&L->qkv, xn, rows, m->tile_rows, &r, qkv, threads);
    rotary_inplace(qkv, qkv_width, rows, m->heads, m->dim, positions, m->cos, m->sin, threads);
    rotary_inplace(qkv + qd, qkv_width, rows, m->kv_heads, m->dim, positions, m->cos, m->sin,
                   threads);
    write_kv(qkv + qd, qkv_width, rows, m->kv_heads, m->dim, out_loc, m->pool_slots, L->k_pool,
             m->kv_bf16, threads);
    write_kv(qkv + qd + kvd, qkv_width, rows, m->kv_heads, m->dim, out_loc, m->pool_slots,
             L->v_pool, m->kv_bf16, threads);
    decode_attention(qkv, qkv_width, L->k_pool, L->v_pool, m->pool_slots, slots, lmax, lens,
                     rows, m->heads, m->kv_heads, m->dim, 1.0f / sqrtf((float)m->dim), att,
                     threads, m->kv_bf16);
    linear_into(&L->o, att, rows, m->tile_rows, &r, tmp, threads);
    add_into(h, tmp, rows * hid);
    rms_norm(h, hid, L->post_norm, rows, hid, m->eps, xn, threads);
    linear_into(&L->gate_up, xn, rows, m->tile_rows, &r, gu, threads);
    silu_mul(gu, rows, m->inter, act, threads);
    linear_into(&L->down, act, rows, m->tile_rows, &r, tmp, threads);
    add_into(h, tmp, rows * hid);
  }
  rms_norm(h, hid, m->final_norm, rows, hid, m->eps, xn, threads);
  memcpy(h, xn, sizeof(float) * rows * hid);
  free(xn), free(tmp), free(qkv), free(att), free(gu), free(act);
  free(r.xq), free(r.xs), free(r.xsum);
}
