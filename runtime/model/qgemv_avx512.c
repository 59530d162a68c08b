// The int4 / int8 products of qgemv.c on AVX-512 VNNI (vpdpwssd), for CPUs without AMX tiles.
//
// Same integers as the AVX2 kernels (activations rounded to int16 per group of 32 by
// quantize_rows, exact int32 group sums), summed in another order. Four groups go through one
// zmm: lanes 4i..4i+3 hold partial sums of group i, so a block of 4 groups costs each
// activation row 4 vpdpwssd and one convert / scale / add for all four (the AVX2 kernels pay
// those per group). Two weight rows run against 8 activation rows held in registers: a
// block's codes are unpacked once for 8 rows (the AVX2 kernels: for every 4) and each
// activation load feeds two products (at 16 rows the activations outgrow L1, and reading them
// was the bound). Eight groups a vector (fewer converts, twice the unpacking) measured no
// better on Zen 4, and one weight row at a time 1.1-1.3x slower at 16 rows.
//
// The activations are laid out once per product to match the unpacked codes: block b of row r
// is [chunk j = 0..3][group i = 0..3][8 int16] holding elements 8j..8j+7 of group 4b + i, with
// zeros past the last group; its scales and int4's group sums spread to the 16 lanes.
// Compiled with qgemv.c; only called where qgemv.py found avx512_vnni (set_avx512).

#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GROUP 32
#define BLOCK 128  // values of 4 groups
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define INLINE static inline __attribute__((always_inline))
#define ROWS 8  // activation rows held in registers at once (times 2 weight rows)

typedef struct {
  int16_t *x;          // [rows, blocks, 128]
  float *scale, *sum;  // [rows, blocks, 16]: xs of group i in lanes 4i..4i+3; xsum in lane 4i
  int64_t blocks;
} laid_out;

static laid_out lay_out(const int16_t *xq, const float *xs, const float *xsum, int64_t rows,
                        int64_t k) {
  int64_t groups = k / GROUP, blocks = (groups + 3) / 4;
  laid_out l = {malloc(sizeof(int16_t) * rows * blocks * BLOCK),
                malloc(sizeof(float) * rows * blocks * 16),
                calloc((size_t)(rows * blocks * 16), sizeof(float)), blocks};
  for (int64_t r = 0; r < rows; r++)
    for (int64_t b = 0; b < blocks; b++) {
      int16_t *x = l.x + (r * blocks + b) * BLOCK;
      float *s = l.scale + (r * blocks + b) * 16, *sum = l.sum + (r * blocks + b) * 16;
      for (int i = 0; i < 4; i++) {
        int64_t g = 4 * b + i;
        for (int j = 0; j < 4; j++) {
          if (g < groups)
            memcpy(x + (j * 4 + i) * 8, xq + r * k + g * GROUP + j * 8, 16);
          else
            memset(x + (j * 4 + i) * 8, 0, 16);
        }
        for (int e = 0; e < 4; e++) s[4 * i + e] = g < groups ? xs[r * groups + g] : 0.0f;
        if (g < groups) sum[4 * i] = xsum[r * groups + g];
      }
    }
  return l;
}

static void release(laid_out *l) { free(l->x), free(l->scale), free(l->sum); }

// The codes of block b (t of its 4 groups present) as four vectors of int16 in the layout
// above. int4: 16 bytes a group, byte e holding element e (low nibble) and e + 16 (high), so
// group i is the 128-bit lane i of one load and unpacking bytes to words keeps it there.
AVX512 INLINE void int4_codes(const uint8_t *qo, int64_t b, int t, __m512i w[4]) {
  __m512i z = _mm512_maskz_loadu_epi8(t == 4 ? ~0ULL : (1ULL << (16 * t)) - 1, qo + b * 64);
  __m512i low = _mm512_set1_epi8(15), zero = _mm512_setzero_si512();
  __m512i lo = _mm512_and_si512(z, low), hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), low);
  w[0] = _mm512_unpacklo_epi8(lo, zero), w[1] = _mm512_unpackhi_epi8(lo, zero);
  w[2] = _mm512_unpacklo_epi8(hi, zero), w[3] = _mm512_unpackhi_epi8(hi, zero);
}

// int8: 32 bytes a group; the 8-byte pieces j of the four groups gathered, then widened.
AVX512 INLINE void int8_codes(const int8_t *qo, int64_t b, int t, __m512i w[4]) {
  __mmask64 m0 = t >= 2 ? ~0ULL : 0xffffffffULL, m1 = t == 4 ? ~0ULL : t == 3 ? 0xffffffffULL : 0;
  __m512i z0 = _mm512_maskz_loadu_epi8(m0, qo + b * BLOCK);
  __m512i z1 = _mm512_maskz_loadu_epi8(m1, qo + b * BLOCK + 64);
  __m512i a = _mm512_permutex2var_epi64(z0, _mm512_setr_epi64(0, 4, 8, 12, 1, 5, 9, 13), z1);
  __m512i c = _mm512_permutex2var_epi64(z0, _mm512_setr_epi64(2, 6, 10, 14, 3, 7, 11, 15), z1);
  w[0] = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(a));
  w[1] = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(a, 1));
  w[2] = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(c));
  w[3] = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(c, 1));
}

// Four floats of a row's groups (t present, the rest 0) spread to lanes 4i..4i+3.
AVX512 INLINE __m512 spread(const float *v, int t) {
  const __m512i at = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  return _mm512_permutexvar_ps(at, _mm512_castps128_ps512(_mm_maskz_loadu_ps((1 << t) - 1, v)));
}

// Split scales (two a group, one per half of 16): half h of each of four groups, spread alike.
AVX512 INLINE __m512 spread_half(const float *v, int t, int h) {
  __m512i at = _mm512_add_epi32(
      _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6), _mm512_set1_epi32(h));
  __m256 pairs = _mm256_maskz_loadu_ps((__mmask8)((1 << (2 * t)) - 1), v);
  return _mm512_permutexvar_ps(at, _mm512_castps256_ps512(pairs));
}

// P weight rows (1 or 2: each activation load then feeds P products, which halves the reads
// of the activations, the bound at 16 rows) against R activation rows (bits 4: w = q * d + m;
// 8: w = q * d, plus m where mm is given; 16: int8 codes with d per half group, chunks 0-1
// and 2-3 scaled apart). Weight row p is at qo + p * stride, its scales at dd + p * groups
// (twice that for 16), its m at mm + p * groups.
AVX512 INLINE void weight_rows(const void *qo, int64_t stride, const float *dd, const float *mm,
                               int64_t groups, const laid_out *l, int64_t r0, int64_t n,
                               float *y, const int bits, const int P, const int R) {
  __m512 acc[2][ROWS];
#pragma GCC unroll 16  // acc stays in registers only where every loop over r is unrolled
  for (int r = 0; r < R; r++) acc[0][r] = acc[1][r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < l->blocks; b++) {
    int t = groups - 4 * b < 4 ? (int)(groups - 4 * b) : 4;
    __m512i w[2][4];
    __m512 d[2], e[2], m[2];
    for (int p = 0; p < P; p++) {
      if (bits == 4)
        int4_codes((const uint8_t *)qo + p * stride, b, t, w[p]);
      else
        int8_codes((const int8_t *)qo + p * stride, b, t, w[p]);
      if (bits == 16) {
        d[p] = spread_half(dd + 2 * (p * groups + 4 * b), t, 0);
        e[p] = spread_half(dd + 2 * (p * groups + 4 * b), t, 1);
      } else {
        d[p] = e[p] = spread(dd + p * groups + 4 * b, t);
      }
      m[p] = mm ? spread(mm + p * groups + 4 * b, t) : d[p];
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
      int64_t at = (r0 + r) * l->blocks + b;
      const int16_t *x = l->x + at * BLOCK;
      __m512i x0 = _mm512_loadu_si512(x), x1 = _mm512_loadu_si512(x + 32);
      __m512i x2 = _mm512_loadu_si512(x + 64), x3 = _mm512_loadu_si512(x + 96);
      __m512 s = _mm512_loadu_ps(l->scale + at * 16);
      for (int p = 0; p < P; p++) {  // the 16 int32 lanes of the block's integer products
        __m512i i = _mm512_madd_epi16(w[p][0], x0);
        i = _mm512_dpwssd_epi32(i, w[p][1], x1);
        if (bits == 16) {  // the first halves, then the second ones
          __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(i), s);
          acc[p][r] = _mm512_fmadd_ps(f, d[p], acc[p][r]);
          i = _mm512_madd_epi16(w[p][2], x2);
        } else {
          i = _mm512_dpwssd_epi32(i, w[p][2], x2);
        }
        i = _mm512_dpwssd_epi32(i, w[p][3], x3);
        __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(i), s);
        acc[p][r] = _mm512_fmadd_ps(f, e[p], acc[p][r]);
        if (bits == 4 || mm)
          acc[p][r] = _mm512_fmadd_ps(m[p], _mm512_loadu_ps(l->sum + at * 16), acc[p][r]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; r++)
    for (int p = 0; p < P; p++) y[r * n + p] = _mm512_reduce_add_ps(acc[p][r]);
}

#define ROWS_CASE(R)                                                                   \
  case R:                                                                              \
    if (P == 2)                                                                        \
      weight_rows(qo, stride, dd, mm, groups, l, r0, n, y + r0 * n + o, bits, 2, R);   \
    else                                                                               \
      weight_rows(qo, stride, dd, mm, groups, l, r0, n, y + r0 * n + o, bits, 1, R);   \
    break;

// Rows r0.. (8 at a time) of y for weight rows o..o + P - 1.
AVX512 INLINE void row_blocks(const void *qo, int64_t stride, const float *dd, const float *mm,
                              int64_t groups, const laid_out *l, int64_t rows, int64_t n,
                              int64_t o, float *y, const int bits, int P) {
  for (int64_t r0 = 0; r0 < rows; r0 += ROWS) {
    switch (rows - r0 < ROWS ? rows - r0 : ROWS) {
      ROWS_CASE(1) ROWS_CASE(2) ROWS_CASE(3) ROWS_CASE(4) ROWS_CASE(5) ROWS_CASE(6)
      ROWS_CASE(7) default: ROWS_CASE(8)
    }
  }
}

// Weight rows taken together (2 from 4 activation rows on). Below, the weights' reads set the
// pace: a decode step's do not fit the caches, and two rows at a time streamed them slower
// (the int8 LM head at one row: 2x slower than one at a time).
static inline int pairs(int64_t rows, int64_t n, int64_t o) {
  return rows >= 4 && o + 1 < n ? 2 : 1;
}

AVX512 void int4_matmul_avx512(const uint8_t *q, const float *d, const float *m, int64_t n,
                               int64_t k, const int16_t *xq, const float *xs, const float *xsum,
                               int64_t rows, float *y, int threads) {
  int64_t groups = k / GROUP;
  laid_out l = lay_out(xq, xs, xsum, rows, k);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t o = 0; o < n; o += 2)
    for (int64_t p = o; p < o + 2 && p < n; p += pairs(rows, n, p))
      row_blocks(q + p * (k / 2), k / 2, d + p * groups, m + p * groups, groups, &l, rows, n, p,
                 y, 4, pairs(rows, n, p));
  release(&l);
}

AVX512 void int8_matmul_avx512(const int8_t *q, const float *d, const float *m, int split,
                               int64_t n, int64_t k, const int16_t *xq, const float *xs,
                               const float *xsum, int64_t rows, float *y, int threads) {
  int64_t groups = k / GROUP;
  laid_out l = lay_out(xq, xs, xsum, rows, k);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t o = 0; o < n; o += 2)
    for (int64_t p = o; p < o + 2 && p < n; p += pairs(rows, n, p)) {
      const float *mm = m ? m + p * groups : NULL;
      if (split)
        row_blocks(q + p * k, k, d + 2 * p * groups, mm, groups, &l, rows, n, p, y, 16,
                   pairs(rows, n, p));
      else
        row_blocks(q + p * k, k, d + p * groups, mm, groups, &l, rows, n, p, y, 8,
                   pairs(rows, n, p));
    }
  release(&l);
}
