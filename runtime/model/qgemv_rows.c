// The row-wise kernels of a decoder layer besides its products (RMSNorm, rotary, SiLU, KV
// writes), decode attention over the KV pool and greedy picks, for the CPU (AVX2 + FMA).
// Built with qgemv.c by runtime/model/qgemv.py; qgemv.c's decode_step calls them.

#include "qgemv.h"

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
    float *scores = (float *)malloc(sizeof(float) * (group * len + KEYS * dim));
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
