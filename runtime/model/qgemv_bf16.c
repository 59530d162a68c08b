// Products on the bf16 copy of a quantized weight with AVX-512 BF16 dot products (vdpbf16ps),
// for CPUs that have them but no AMX tiles (AMD Zen 4 and later, Intel Cooper Lake).
//
// The weight is in the AMX tile layout (runtime/model/qgemv.py `bf16_tiles`): for each block of
// 16 output columns and 32 inputs, 16 pairs of inputs, each [16 columns][2 bf16]. One pair is
// one zmm, so a product is: broadcast an activation row's two bf16 values at that pair to all
// lanes, and vdpbf16ps adds both products into the 16 columns' fp32 sums. 8 activation rows
// by 32 columns (16 accumulators) are held in registers: each weight load feeds 8 rows and
// each broadcast two column blocks. Activations are rounded to bf16 (as on AMX), sums are fp32.
// Only called where qgemv.py found avx512_bf16.

#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BF16 __attribute__((target("avx512f,avx512bf16")))
#define INLINE static inline __attribute__((always_inline))
#define ROWS 8     // activation rows held in registers at once (times 2 column blocks)
#define CHUNK 64   // activation rows whose bf16 copy stays in L2 while the weight streams by
#define TILE 512   // bf16 values in one block of 16 columns by 32 inputs
// The weight's lines this many column blocks ahead are fetched while a block is multiplied
// (the weight streams from memory; from 16 rows on the products no longer hide its reads):
// 576 x 3,072 at 16 rows, 2 threads, weights out of cache: 1.2x.
#define AHEAD 4

uint16_t *bf16_rows(const float *x, int64_t rows, int64_t padded, int64_t k);  // qgemv.c

// y [R rows, C * 16 columns] (row stride n) = x [R rows, k] (bf16, row stride k) @ those
// columns of w (blocks of the C column blocks at w, w + kb * TILE).
BF16 INLINE void dot_block(const uint16_t *w, int64_t kb, const uint16_t *x, int64_t k,
                           float *y, int64_t n, const int R, const int C) {
  __m512 acc[2][ROWS];
#pragma GCC unroll 16  // acc stays in registers only where every loop over r is unrolled
  for (int r = 0; r < R; r++) acc[0][r] = acc[1][r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < kb; b++) {
    const uint16_t *w0 = w + b * TILE, *w1 = w0 + kb * TILE, *xb = x + b * 32;
    for (int p = 0; p < 16; p++) {
      _mm_prefetch((const char *)(w0 + AHEAD * kb * TILE + p * 32), _MM_HINT_T0);
      if (C == 2) _mm_prefetch((const char *)(w1 + AHEAD * kb * TILE + p * 32), _MM_HINT_T0);
      __m512bh c0 = (__m512bh)_mm512_loadu_si512(w0 + p * 32);
      __m512bh c1 = C == 2 ? (__m512bh)_mm512_loadu_si512(w1 + p * 32) : c0;
#pragma GCC unroll 16
      for (int r = 0; r < R; r++) {
        int32_t pair;
        memcpy(&pair, xb + r * k + 2 * p, sizeof pair);
        __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
        acc[0][r] = _mm512_dpbf16_ps(acc[0][r], a, c0);
        if (C == 2) acc[1][r] = _mm512_dpbf16_ps(acc[1][r], a, c1);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; r++) {
    _mm512_storeu_ps(y + r * n, acc[0][r]);
    if (C == 2) _mm512_storeu_ps(y + r * n + 16, acc[1][r]);
  }
}

#define ROWS_CASE(R)                                                \
  case R:                                                           \
    if (C == 2)                                                     \
      dot_block(w, kb, x + r * k, k, y + r * n + o, n, R, 2);      \
    else                                                            \
      dot_block(w, kb, x + r * k, k, y + r * n + o, n, R, 1);      \
    break;

// Rows r0..r1 of y for the C column blocks from column o (w: their first block).
BF16 INLINE void dot_rows(const uint16_t *w, int64_t kb, const uint16_t *x, int64_t k, float *y,
                          int64_t n, int64_t o, int64_t r0, int64_t r1, int C) {
  for (int64_t r = r0; r < r1; r += ROWS) {
    switch (r1 - r < ROWS ? r1 - r : ROWS) {
      ROWS_CASE(1) ROWS_CASE(2) ROWS_CASE(3) ROWS_CASE(4) ROWS_CASE(5) ROWS_CASE(6)
      ROWS_CASE(7) default: ROWS_CASE(8)
    }
  }
}

// y [rows, n] = x [rows, k] (float) @ w.T for w [n, k] in tile layout (n a multiple of 16, k
// of 32).
BF16 void bf16_linear(const uint16_t *w, int64_t n, int64_t k, const float *x, int64_t rows,
                      float *y, int threads) {
  uint16_t *xb = bf16_rows(x, rows, rows, k);
  int64_t kb = k / 32, nb = n / 16;
#pragma omp parallel num_threads(threads)
  for (int64_t r0 = 0; r0 < rows; r0 += CHUNK) {
    int64_t r1 = r0 + CHUNK < rows ? r0 + CHUNK : rows;
#pragma omp for schedule(static)  // each thread's blocks in order: the prefetches land
    for (int64_t j = 0; j < nb; j += 2)
      dot_rows(w + j * kb * TILE, kb, xb, k, y, n, j * 16, r0, r1, j + 1 < nb ? 2 : 1);
  }
  free(xb);
}
