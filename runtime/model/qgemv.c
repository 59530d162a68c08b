// Weight-only quantized matrix products for the few rows of a decode step (AVX2 + FMA).
//
// y[r, n] = sum_k x[r, k] * w[n, k] with w kept quantized:
//   int4: w = q * d[n, g] + m[n, g], q in [0, 15], groups of 32 along k, two codes a byte in
//         GGUF's layout (half the bytes of one code a byte: decode reads the weights once a step);
//   int8: w = q * d[n, g] (+ m[n, g] where given), q in [-128, 127], groups of 32 along k, d
//         optionally per half group of 16 (Q6_K's scales; GGUF codes widened exactly).
// x is first rounded to int16 per group of 32 (xq * xs; llama.cpp rounds to int8 instead, which
// cost 0.8% perplexity here), so each group is one exact integer dot product; the m term uses
// the float sum of the group.
// Built (with qgemv_rows.c, qgemv_avx512.c and qgemv_bf16.c) by runtime/model/qgemv.py with gcc -O3 -mavx2
// -mfma -fopenmp.

#include <sys/syscall.h>
#include <unistd.h>

#include "qgemv.h"

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

// int8 codes: w = q * d + m, d per group of 32 or, `split`, per half group of 16 (d [n, k / 16]:
// Q6_K's sub-blocks), m per group of 32 or none (mm NULL). Split halves are the two madd
// halves of a group, each converted and scaled on its own.
static inline __attribute__((always_inline)) void int8_row(
    const int8_t *qo, const float *dd, const float *mm, int64_t groups, int64_t k,
    const int16_t *xq, const float *xs, const float *xsum, int64_t n, float *y, const int R,
    const int split) {
  __m256 acc[4];
  for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; g++) {
    __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qo + g * GROUP)));
    __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qo + g * GROUP + 16)));
    for (int r = 0; r < R; r++) {
      const int16_t *x = xq + r * k + g * GROUP;
      float s = xs[r * groups + g];
      if (split) {
        __m256i a = _mm256_madd_epi16(w0, _mm256_loadu_si256((const __m256i *)x));
        __m256i b = _mm256_madd_epi16(w1, _mm256_loadu_si256((const __m256i *)(x + 16)));
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dd[2 * g] * s), _mm256_cvtepi32_ps(a), acc[r]);
        acc[r] =
            _mm256_fmadd_ps(_mm256_set1_ps(dd[2 * g + 1] * s), _mm256_cvtepi32_ps(b), acc[r]);
      } else {
        __m256 p = _mm256_cvtepi32_ps(dot32(w0, w1, x));
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dd[g] * s), p, acc[r]);
      }
    }
  }
  for (int r = 0; r < R; r++)
    y[r * n] = hsum(acc[r]) + (mm ? dot_groups(mm, xsum + r * groups, groups) : 0.0f);
}

#define INT8_ROWS(R)                                                          \
  case R:                                                                     \
    if (split)                                                                \
      int8_row(qo, dd, mm, groups, k, x, sc, sum, n, out, R, 1);              \
    else                                                                      \
      int8_row(qo, dd, mm, groups, k, x, sc, sum, n, out, R, 0);              \
    break;

static void int8_matmul_avx2(const int8_t *q, const float *d, const float *m, int split,
                             int64_t n, int64_t k, const int16_t *xq, const float *xs,
                             const float *xsum, int64_t rows, float *y, int threads) {
  int64_t groups = k / GROUP;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t o = 0; o < n; o++) {
    const int8_t *qo = q + o * k;
    const float *dd = d + o * groups * (split ? 2 : 1), *mm = m ? m + o * groups : NULL;
    for (int64_t r = 0; r < rows; r += 4) {
      const int16_t *x = xq + r * k;
      const float *sc = xs + r * groups, *sum = xsum + r * groups;
      float *out = y + r * n + o;
      switch (rows - r < 4 ? rows - r : 4) {
        INT8_ROWS(1) INT8_ROWS(2) INT8_ROWS(3) default: INT8_ROWS(4)
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
void int8_matmul_avx512(const int8_t *q, const float *d, const float *m, int split, int64_t n,
                        int64_t k, const int16_t *xq, const float *xs, const float *xsum,
                        int64_t rows, float *y, int threads);

void int4_matmul(const uint8_t *q, const float *d, const float *m, int64_t n, int64_t k,
                 const int16_t *xq, const float *xs, const float *xsum, int64_t rows, float *y,
                 int threads) {
  if (avx512_int4_rows && rows >= avx512_int4_rows)
    int4_matmul_avx512(q, d, m, n, k, xq, xs, xsum, rows, y, threads);
  else
    int4_matmul_avx2(q, d, m, n, k, xq, xs, xsum, rows, y, threads);
}

void int8_matmul(const int8_t *q, const float *d, const float *m, int split, int64_t n, int64_t k,
                 const int16_t *xq, const float *xs, const float *xsum, int64_t rows, float *y,
                 int threads) {
  if (avx512_int8_rows && rows >= avx512_int8_rows)
    int8_matmul_avx512(q, d, m, split, n, k, xq, xs, xsum, rows, y, threads);
  else
    int8_matmul_avx2(q, d, m, split, n, k, xq, xs, xsum, rows, y, threads);
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

void int8_dequantize(const int8_t *q, const float *d, const float *m, int split, int64_t n,
                     int64_t k, float *out, int threads) {
  int64_t groups = k / GROUP, size = split ? GROUP / 2 : GROUP;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t o = 0; o < n; o++)
    for (int64_t j = 0; j < k; j++)
      out[o * k + j] = (float)q[o * k + j] * d[o * (k / size) + j / size] +
                       (m ? m[o * groups + j / GROUP] : 0.0f);
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

void int8_linear(const int8_t *q, const float *s, const float *m, int split, int64_t n, int64_t k,
                 const float *x, int64_t rows, float *y, int threads) {
  float *xs, *xsum;
  int16_t *xq = round_activations(x, rows, k, &xs, &xsum);
  int8_matmul(q, s, m, split, n, k, xq, xs, xsum, rows, y, threads);
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
  int64_t bits, n, k;  // bits: 4 (groups of 32: q, d, m) or 8 (q, d, m or NULL: int8_row)
  const void *q;
  const float *d, *m, *bias;  // bias may be NULL
  const uint16_t *tiles;      // the bf16 tiles of the weight (tiles_linear), or NULL
  int64_t split;              // int8: d per half group of 16
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
      int8_matmul((const int8_t *)w->q, w->d, w->m, (int)w->split, w->n, w->k, r->xq, r->xs,
                  r->xsum, rows, y, threads);
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
