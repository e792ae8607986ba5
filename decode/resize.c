// The fast path's scaler (see resize.h).
//
// Filter: output pixel i of an axis of n region pixels is centred at
// c = x0 + (i + 0.5) * scale in region coordinates (pixel j covers
// [j, j+1)); source pixel j weighs max(0, 1 - |j + 0.5 - c| / s),
// s = max(scale, 1), normalised over the pixels inside the region. That is
// the triangle filter widened by the downscale factor (antialiased
// bilinear) exactly as PIL's Image.resize(BILINEAR) defines it (what
// torchvision 0.14 uses on PIL images); upscaling is plain bilinear with
// edge pixels clamped. Nothing outside the region is read: the caller
// makes it the crop for "crop, then resize" (x0 = 0, scale = n / size),
// or the part of the image the taps reach for "resize, then crop" (PIL
// reads across the crop's edges, and clips only at the image's).
//
// Fixed point: weights are Q14 (>= 0, summing to exactly 1 << 14, so flat
// areas stay exact and nothing overflows or needs clamping). The vertical
// pass runs first, on rows of bytes (channels do not matter to it), into a
// Q7 int16 row (value × 128, rounded); the horizontal pass then takes that
// row two RGB pixels at a time, regrouped to R0 R1 G0 G1 B0 B1, which
// pmaddwd multiplies by a pair of weights in every channel at once, and
// rounds to 8 bits. Every
// kernel does exactly this integer arithmetic (sums of exact products, in
// any order), so they agree bit for bit; resize_test.go checks them
// against the float definition.
//
// Per output row: vertical pass (source rows -> mid), horizontal pass
// (mid -> the slot, or an RGBX staging row that emit spreads into it).
// Flipping mirrors the horizontal tables.

#include "resize.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

// LS_NO_SIMD builds the portable kernel only, as on arm64 (to test that
// build on x86-64: CGO_CFLAGS=-DLS_NO_SIMD).
#if defined(__x86_64__) && !defined(LS_NO_SIMD)
#include <immintrin.h>
#define LS_X86 1
#define LS_AVX2 __attribute__((target("avx2")))
#endif
#define LS_INLINE static inline __attribute__((always_inline))

#define LS_WBITS 14              // weights: Q14
#define LS_VSHIFT 7              // vertical: Q14 -> Q7
#define LS_HSHIFT (LS_WBITS + 7) // horizontal: Q14 × Q7 -> 8 bits
#define LS_VROUND (1 << (LS_VSHIFT - 1))
#define LS_HROUND (1 << (LS_HSHIFT - 1))

ls_resize *ls_resize_new(void) { return calloc(1, sizeof(ls_resize)); }

void ls_resize_free(ls_resize *r) {
	if (!r) return;
	free(r->vtab);
	free(r->htab);
	free(r->vw);
	free(r->hoff);
	free(r->hw);
	free(r->mid);
	free(r->acc);
	free(r->row);
	free(r->q);
	free(r->f);
	free(r);
}

int ls_resize_impl(void) {
#if LS_X86
	// Every thread computes the same answer: relaxed atomics suffice.
	static int impl = -1;
	int i = __atomic_load_n(&impl, __ATOMIC_RELAXED);
	if (i < 0) {
		__builtin_cpu_init();
		i = __builtin_cpu_supports("avx2") ? LS_IMPL_AVX2 : LS_IMPL_SSE2;
		__atomic_store_n(&impl, i, __ATOMIC_RELAXED);
	}
	return i;
#else
	return LS_IMPL_C;
#endif
}

// grow makes *p hold at least n elements of sz bytes, zeroed when
// (re)allocated, so that padding the kernels read (and multiply by 0) is
// initialised.
static int grow(void *pp, size_t *cap, size_t n, size_t sz) {
	void **p = (void **)pp;
	if (n <= *cap) return 0;
	size_t c = n + n / 4 + 16;
	void *q = calloc(c, sz);
	if (!q) return -ENOMEM;
	free(*p);
	*p = q;
	*cap = c;
	return 0;
}

// maxtaps bounds the taps of any output of an axis of n pixels sampled
// every scale pixels: they lie in an open interval 2s wide, so floor(2s) +
// 1, plus one for rounding.
static int maxtaps(int n, double scale) {
	double s = scale < 1 ? 1 : scale;
	int k = (int)(2 * s) + 2;
	return k < n ? k : n;
}

// axis is one axis of a scale: n region pixels, size outputs centred at
// x0 + (i + 0.5) * scale, the filter's radius s (and 1 / s) in source
// pixels, and the most taps an output can have.
typedef struct {
	int n, size, k;
	double x0, scale, s, is;
} axis;

static axis mkaxis(int n, int size, double x0, double scale) {
	axis a = {n, size, maxtaps(n, scale), x0, scale, 1, 1};
	if (a.scale > 1) {
		a.s = a.scale;
		a.is = 1 / a.s;
	}
	return a;
}

// taps computes output i's taps on axis x (see the file comment): it
// stores the first source pixel in *first and the Q14 weights in q (x->k
// long, zero after the taps; f: scratch as long) and returns their number
// (>= 1). The loops run x->k times whatever the count, which the branch
// predictor likes better.
static int taps(const axis *x, int i, int *first, int16_t *q, double *f) {
	double c = x->x0 + (i + 0.5) * x->scale;
	// Taps j with |j + 0.5 - c| < s: j > a and j < b.
	double a = c - x->s - 0.5, b = c + x->s - 0.5;
	int lo = a < 0 ? 0 : (int)a + 1;
	int hi = b <= 0 ? -1 : (int)b;
	if (hi >= 0 && (double)hi == b) hi--;
	if (hi > x->n - 1) hi = x->n - 1;
	if (lo > x->n - 1) lo = x->n - 1;
	if (hi < lo) hi = lo; // not for a region that holds the taps; stay defined
	int k = hi - lo + 1;
	if (k > x->k) k = x->k; // cannot happen; stay in bounds
	double sum = 0, d = lo + 0.5 - c;
	for (int j = 0; j < x->k; j++, d += 1) {
		double v = 1 - __builtin_fabs(d) * x->is;
		// max(v, 0), and 0 past the taps, without branches (the
		// branch predictor cannot guess the edge taps).
		f[j] = (v + __builtin_fabs(v)) * 0.5 * (j < k);
		sum += f[j];
	}
	if (!(sum > 0)) { // cannot happen; keep the weights summing to one
		f[0] = sum = 1;
		for (int j = 1; j < x->k; j++) f[j] = 0;
	}
	// Round the running sum, not each weight: the weights stay >= 0 and
	// sum to exactly 1 << 14 (so results stay within 0..255 and flat
	// areas exact, in every kernel), each within 1 of its exact value.
	double norm = (1 << LS_WBITS) / sum, run = 0;
	int prev = 0;
	for (int j = 0; j < x->k; j++) {
		run += f[j] * norm;
		int cur = j >= k - 1 ? 1 << LS_WBITS : (int)(run + 0.5); // 0 past the taps
		q[j] = (int16_t)(cur - prev);
		prev = cur;
	}
	*first = lo;
	return k;
}

static inline int32_t pair(int16_t a, int16_t b) {
	return (int32_t)((uint32_t)(uint16_t)a | (uint32_t)(uint16_t)b << 16);
}
static inline int16_t lo16(int32_t p) { return (int16_t)(uint16_t)((uint32_t)p & 0xFFFF); }
static inline int16_t hi16(int32_t p) { return (int16_t)(uint16_t)((uint32_t)p >> 16); }

// The horizontal weight table: output p's weight pair t (its taps 2t and
// 2t+1) is hw[HW(p, t, hp)], repeated in 4 int32 (one per lane of an RGB_
// pixel), with outputs p and p+4 of each group of 8 side by side, so that
// one 256-bit load serves the AVX2 kernel's register holding both.
#define HW(p, t, hp) (((((size_t)(p) >> 3) * 4 + ((p) & 3)) * (hp) + (t)) * 8 + (((p) >> 2) & 1) * 4)

// ---- portable C kernels (the specification of the SIMD ones) ----

// vpass_c: out[x] = Q7 of sum_k w_k × src[k·stride + x], x < n. Written
// for the vectorizer: a row at a time, int16 × int16 -> int32 products
// (pmullw/pmulhw on SSE2, smlal on NEON).
static void vpass_c(const uint8_t *restrict src, ptrdiff_t stride, int n, const int32_t *w, int cnt,
		int32_t *restrict acc, int16_t *restrict out) {
	for (int x = 0; x < n; x++) acc[x] = LS_VROUND;
	for (int k = 0; k < cnt; k++) {
		int16_t wk = k & 1 ? hi16(w[k >> 1]) : lo16(w[k >> 1]);
		const uint8_t *restrict s = src + k * stride;
		for (int x = 0; x < n; x++) acc[x] += (int32_t)wk * (int16_t)s[x];
	}
	for (int x = 0; x < n; x++) out[x] = (int16_t)(acc[x] >> LS_VSHIFT);
}

// hpass_c: row[4p + ch] for p < size, ch < 3 (and junk in ch 3), the
// four lanes of a pixel in one vector (GCC's and clang's generic vectors:
// NEON on arm64). Results are within 0..255: the weights are >= 0 and sum
// to one.
typedef int16_t ls_i16x4 __attribute__((vector_size(8)));
typedef int32_t ls_i32x4 __attribute__((vector_size(16)));
typedef uint8_t ls_u8x4 __attribute__((vector_size(4)));

static void hpass_c(const int16_t *restrict mid, const int32_t *off, const int32_t *hw, int hp, int size,
		uint8_t *restrict row) {
	for (int p = 0; p < size; p++) {
		const int16_t *m = mid + off[p];
		const int32_t *wp = hw + HW(p, 0, hp);
		ls_i32x4 a = {LS_HROUND, LS_HROUND, LS_HROUND, LS_HROUND};
		for (int t = 0; t < hp; t++, m += 6) {
			ls_i16x4 v0, v1;
			memcpy(&v0, m, sizeof v0);
			memcpy(&v1, m + 3, sizeof v1);
			a += __builtin_convertvector(v0, ls_i32x4) * (int32_t)lo16(wp[8 * t]) +
				__builtin_convertvector(v1, ls_i32x4) * (int32_t)hi16(wp[8 * t]);
		}
		ls_u8x4 b = __builtin_convertvector(a >> LS_HSHIFT, ls_u8x4);
		memcpy(row + 4 * p, &b, sizeof b);
	}
}

// emit spreads output row y, RGBX at row, into the slot. Plain loops: the
// compiler vectorizes them.
LS_INLINE void emit_body(const uint8_t *restrict row, uint8_t *restrict dst, int size, int y, int nhwc) {
	if (nhwc) {
		uint8_t *restrict d = dst + (size_t)y * 3 * size;
		for (int i = 0; i < size; i++) {
			d[3 * i] = row[4 * i];
			d[3 * i + 1] = row[4 * i + 1];
			d[3 * i + 2] = row[4 * i + 2];
		}
		return;
	}
	size_t plane = (size_t)size * size;
	uint8_t *restrict R = dst + (size_t)y * size;
	uint8_t *restrict G = R + plane;
	uint8_t *restrict B = G + plane;
	for (int i = 0; i < size; i++) {
		R[i] = row[4 * i];
		G[i] = row[4 * i + 1];
		B[i] = row[4 * i + 2];
	}
}

static void emit(const uint8_t *row, uint8_t *dst, int size, int y, int nhwc) {
	emit_body(row, dst, size, y, nhwc);
}

#if LS_X86
// ---- SSE2 (every x86-64) ----

// vpass_sse2 does vpass_c 16 bytes at a time (it reads and writes n
// rounded up to 16), np weight pairs (an odd last tap pairs with its own
// row at weight 0).
LS_INLINE void vpass_sse2_body(const uint8_t *src, ptrdiff_t stride, int n, const int32_t *w, int cnt,
		int16_t *out, const int np) {
	const __m128i z = _mm_setzero_si128(), rnd = _mm_set1_epi32(LS_VROUND);
	for (int x = 0; x < n; x += 16) {
		__m128i a0 = rnd, a1 = rnd, a2 = rnd, a3 = rnd;
		const uint8_t *s = src + x;
		for (int t = 0; t < np; t++, s += 2 * stride) {
			__m128i p = _mm_loadu_si128((const __m128i *)s);
			__m128i q = 2 * t + 1 < cnt ? _mm_loadu_si128((const __m128i *)(s + stride)) : p;
			__m128i wk = _mm_set1_epi32(w[t]);
			__m128i lo = _mm_unpacklo_epi8(p, q), hi = _mm_unpackhi_epi8(p, q);
			a0 = _mm_add_epi32(a0, _mm_madd_epi16(_mm_unpacklo_epi8(lo, z), wk));
			a1 = _mm_add_epi32(a1, _mm_madd_epi16(_mm_unpackhi_epi8(lo, z), wk));
			a2 = _mm_add_epi32(a2, _mm_madd_epi16(_mm_unpacklo_epi8(hi, z), wk));
			a3 = _mm_add_epi32(a3, _mm_madd_epi16(_mm_unpackhi_epi8(hi, z), wk));
		}
		a0 = _mm_srai_epi32(a0, LS_VSHIFT);
		a1 = _mm_srai_epi32(a1, LS_VSHIFT);
		a2 = _mm_srai_epi32(a2, LS_VSHIFT);
		a3 = _mm_srai_epi32(a3, LS_VSHIFT);
		_mm_storeu_si128((__m128i *)(out + x), _mm_packs_epi32(a0, a1));
		_mm_storeu_si128((__m128i *)(out + x + 8), _mm_packs_epi32(a2, a3));
	}
}

static void vpass_sse2(const uint8_t *src, ptrdiff_t stride, int n, const int32_t *w, int cnt, int16_t *out) {
	switch ((cnt + 1) / 2) {
	case 1: vpass_sse2_body(src, stride, n, w, cnt, out, 1); break;
	case 2: vpass_sse2_body(src, stride, n, w, cnt, out, 2); break;
	case 3: vpass_sse2_body(src, stride, n, w, cnt, out, 3); break;
	default: vpass_sse2_body(src, stride, n, w, cnt, out, (cnt + 1) / 2);
	}
}

// hpass_sse2 does hpass_c for s8 (a multiple of 8) outputs into the RGBX
// row, one pixel per register: 8 int16 from a tap pair's first pixel on
// (R0 G0 B0 R1 G1 B1 ..), regrouped to R0 R1 G0 G1 B0 B1 (and 2 lanes of
// junk), times the weight pair, is that tap pair in every channel.
LS_INLINE void hpass_sse2_body(const int16_t *mid, const int32_t *off, const int32_t *hw, int s8, uint8_t *row,
		const int hp) {
	const __m128i rnd = _mm_set1_epi32(LS_HROUND);
	for (int i = 0; i < s8; i += 4) {
		__m128i acc[4];
		for (int j = 0; j < 4; j++) {
			int p = i + j;
			const int16_t *m = mid + off[p];
			const int32_t *wp = hw + HW(p, 0, hp);
			__m128i a = rnd;
			for (int t = 0; t < hp; t++) {
				__m128i v = _mm_loadu_si128((const __m128i *)(m + 6 * t));
				v = _mm_unpacklo_epi16(v, _mm_srli_si128(v, 6));
				a = _mm_add_epi32(a, _mm_madd_epi16(v, _mm_loadu_si128((const __m128i *)(wp + 8 * t))));
			}
			acc[j] = _mm_srai_epi32(a, LS_HSHIFT);
		}
		__m128i lo = _mm_packs_epi32(acc[0], acc[1]), hi = _mm_packs_epi32(acc[2], acc[3]);
		_mm_storeu_si128((__m128i *)(row + 4 * i), _mm_packus_epi16(lo, hi));
	}
}

static void hpass_sse2(const int16_t *mid, const int32_t *off, const int32_t *hw, int hp, int s8, uint8_t *row) {
	switch (hp) {
	case 1: hpass_sse2_body(mid, off, hw, s8, row, 1); break;
	case 2: hpass_sse2_body(mid, off, hw, s8, row, 2); break;
	case 3: hpass_sse2_body(mid, off, hw, s8, row, 3); break;
	default: hpass_sse2_body(mid, off, hw, s8, row, hp);
	}
}

// ---- AVX2 ----

// vpass_avx2: vpass_sse2 widening 16 bytes to 16 int16 in one instruction
// (the in-lane unpack and pack then keep the order), weights in registers.
LS_AVX2 LS_INLINE void vpass_avx2_body(const uint8_t *src, ptrdiff_t stride, int n, const int32_t *w, int cnt,
		int16_t *out, const int np) {
	const __m256i rnd = _mm256_set1_epi32(LS_VROUND);
	for (int x = 0; x < n; x += 16) {
		__m256i a0 = rnd, a1 = rnd;
		const uint8_t *s = src + x;
		for (int t = 0; t < np; t++, s += 2 * stride) {
			__m256i p = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)s));
			__m256i q = 2 * t + 1 < cnt ? _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(s + stride))) : p;
			__m256i wk = _mm256_set1_epi32(w[t]);
			a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_unpacklo_epi16(p, q), wk));
			a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_unpackhi_epi16(p, q), wk));
		}
		a0 = _mm256_srai_epi32(a0, LS_VSHIFT);
		a1 = _mm256_srai_epi32(a1, LS_VSHIFT);
		_mm256_storeu_si256((__m256i *)(out + x), _mm256_packs_epi32(a0, a1));
	}
}

LS_AVX2 static void vpass_avx2(const uint8_t *src, ptrdiff_t stride, int n, const int32_t *w, int cnt, int16_t *out) {
	switch ((cnt + 1) / 2) {
	case 1: vpass_avx2_body(src, stride, n, w, cnt, out, 1); break;
	case 2: vpass_avx2_body(src, stride, n, w, cnt, out, 2); break;
	case 3: vpass_avx2_body(src, stride, n, w, cnt, out, 3); break;
	default: vpass_avx2_body(src, stride, n, w, cnt, out, (cnt + 1) / 2);
	}
}

// hpass_avx2: hpass_sse2 with outputs p (low lane) and p+4 (high lane) of
// each group of 8 in one register; after packing, the group is in order.
// It writes the RGBX row, or with planes (R; G and B follow at plane,
// 2·plane) the 8 R, G, B bytes straight there, or with rgb the 24 packed
// bytes there (and 8 bytes of junk after them).
LS_AVX2 LS_INLINE void hpass_avx2_body(const int16_t *mid, const int32_t *off, const int32_t *hw, int s8,
		uint8_t *row, uint8_t *planes, size_t plane, uint8_t *rgb, const int hp) {
	const __m256i rnd = _mm256_set1_epi32(LS_HROUND);
	// Per lane: int16 elements 0 3 1 4 2 5 (R0 R1 G0 G1 B0 B1), then zeros.
	const __m256i regroup = _mm256_setr_epi8(0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1,
		0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1);
	// RGBX pixels -> per lane R0-3 G0-3 B0-3 X0-3; then dwords in order.
	const __m256i split = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
		0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
	const __m256i split_order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	// RGBX pixels -> per lane 12 bytes of RGB; then the 24 bytes together.
	const __m256i pack = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1,
		0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
	const __m256i pack_order = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7);
	for (int i = 0; i < s8; i += 8) {
		__m256i acc[4];
		for (int j = 0; j < 4; j++) {
			const int16_t *m0 = mid + off[i + j], *m1 = mid + off[i + 4 + j];
			const int32_t *wp = hw + HW(i + j, 0, hp);
			__m256i a = rnd;
			for (int t = 0; t < hp; t++) {
				__m256i v = _mm256_inserti128_si256(
					_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(m0 + 6 * t))),
					_mm_loadu_si128((const __m128i *)(m1 + 6 * t)), 1);
				v = _mm256_shuffle_epi8(v, regroup);
				a = _mm256_add_epi32(a, _mm256_madd_epi16(v, _mm256_loadu_si256((const __m256i *)(wp + 8 * t))));
			}
			acc[j] = _mm256_srai_epi32(a, LS_HSHIFT);
		}
		__m256i lo = _mm256_packs_epi32(acc[0], acc[1]), hi = _mm256_packs_epi32(acc[2], acc[3]);
		__m256i b = _mm256_packus_epi16(lo, hi); // pixels i..i+7, RGBX
		if (planes) {
			b = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(b, split), split_order);
			__m128i rg = _mm256_castsi256_si128(b);
			_mm_storel_epi64((__m128i *)(planes + i), rg);
			_mm_storel_epi64((__m128i *)(planes + plane + i), _mm_unpackhi_epi64(rg, rg));
			_mm_storel_epi64((__m128i *)(planes + 2 * plane + i), _mm256_extracti128_si256(b, 1));
		} else if (rgb) {
			b = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(b, pack), pack_order);
			_mm256_storeu_si256((__m256i *)(rgb + 3 * i), b);
		} else {
			_mm256_storeu_si256((__m256i *)(row + 4 * i), b);
		}
	}
}

LS_AVX2 static void hpass_avx2(const int16_t *mid, const int32_t *off, const int32_t *hw, int hp, int s8,
		uint8_t *row, uint8_t *planes, size_t plane, uint8_t *rgb) {
	switch (hp) {
	case 1: hpass_avx2_body(mid, off, hw, s8, row, planes, plane, rgb, 1); break;
	case 2: hpass_avx2_body(mid, off, hw, s8, row, planes, plane, rgb, 2); break;
	case 3: hpass_avx2_body(mid, off, hw, s8, row, planes, plane, rgb, 3); break;
	default: hpass_avx2_body(mid, off, hw, s8, row, planes, plane, rgb, hp);
	}
}

LS_AVX2 static void emit_avx2(const uint8_t *row, uint8_t *dst, int size, int y, int nhwc) {
	emit_body(row, dst, size, y, nhwc);
}
#endif

// tables builds the filter tables for a w×h -> size×size scale, unless
// they are already built for it (Eval and Resize see the same sizes over
// and over).
static int tables(ls_resize *r, int w, int h, int size, int flip, double x0, double sx, double y0, double sy) {
	if (r->valid && r->w == w && r->h == h && r->size == size && r->flip == flip &&
			r->x0 == x0 && r->sx == sx && r->y0 == y0 && r->sy == sy)
		return 0;
	r->valid = 0;
	int vk = maxtaps(h, sy), hk = maxtaps(w, sx);
	int s8 = (size + 7) & ~7;
	// Taps first (q: every output's weights, vk or hk apart), to size the
	// tables by the most taps any output has.
	if (grow(&r->vtab, &r->vtcap, (size_t)2 * size, sizeof(int32_t)) ||
			grow(&r->htab, &r->htcap, (size_t)2 * size, sizeof(int32_t)) ||
			grow(&r->hoff, &r->hcap, (size_t)s8, sizeof(int32_t)) ||
			grow(&r->q, &r->qcap, (size_t)(vk > hk ? vk : hk) * size, sizeof(int16_t)) ||
			grow(&r->f, &r->fcap, (size_t)(vk > hk ? vk : hk), sizeof(double)))
		return -ENOMEM;
	axis va = mkaxis(h, size, y0, sy), ha = mkaxis(w, size, x0, sx);
	int vmax = 1;
	for (int y = 0; y < size; y++) {
		int first, cnt = taps(&va, (flip & LS_FLIP_V) ? size - 1 - y : y, &first, r->q + (size_t)y * vk, r->f);
		r->vtab[2 * y] = first;
		r->vtab[2 * y + 1] = cnt;
		if (cnt > vmax) vmax = cnt;
	}
	int vp = (vmax + 1) / 2;
	if (grow(&r->vw, &r->vwcap, (size_t)size * vp, sizeof(int32_t))) return -ENOMEM;
	for (int y = 0; y < size; y++) {
		const int16_t *q = r->q + (size_t)y * vk;
		int cnt = r->vtab[2 * y + 1];
		for (int t = 0; t < vp; t++)
			r->vw[(size_t)y * vp + t] = pair(2 * t < cnt ? q[2 * t] : 0, 2 * t + 1 < cnt ? q[2 * t + 1] : 0);
	}
	int hmax = 1;
	for (int p = 0; p < size; p++) {
		int first, cnt = taps(&ha, (flip & LS_FLIP_H) ? size - 1 - p : p, &first, r->q + (size_t)p * hk, r->f);
		r->htab[2 * p] = first;
		r->htab[2 * p + 1] = cnt;
		if (cnt > hmax) hmax = cnt;
	}
	int hp = (hmax + 1) / 2;
	if (grow(&r->hw, &r->hwcap, (size_t)s8 * hp * 4, sizeof(int32_t))) return -ENOMEM;
	// Outputs past size (up to s8) read pixel 0 at weight 0.
	for (int p = 0; p < s8; p++) {
		const int16_t *q = r->q + (size_t)p * hk;
		int cnt = p < size ? r->htab[2 * p + 1] : 0;
		r->hoff[p] = p < size ? 3 * r->htab[2 * p] : 0;
		for (int t = 0; t < hp; t++) {
			int32_t v = pair(2 * t < cnt ? q[2 * t] : 0, 2 * t + 1 < cnt ? q[2 * t + 1] : 0);
			int32_t *d = r->hw + HW(p, t, hp);
			d[0] = d[1] = d[2] = d[3] = v;
		}
	}
	r->vp = vp;
	r->hp = hp;
	r->w = w;
	r->h = h;
	r->size = size;
	r->flip = flip;
	r->x0 = x0;
	r->sx = sx;
	r->y0 = y0;
	r->sy = sy;
	r->valid = 1;
	return 0;
}

int ls_resize_rgb(ls_resize *r, int impl, const uint8_t *src, ptrdiff_t stride, int w, int h,
		uint8_t *dst, int size, int nhwc, int flip, double x0, double sx, double y0, double sy) {
	if (!r || w < 1 || h < 1 || size < 1 || stride < 3 * (ptrdiff_t)w) return -EINVAL;
	// The negated comparisons also refuse NaN.
	if (!(sx > 0 && sy > 0 && sx < 1e6 && sy < 1e6 && x0 > -1e6 && x0 < 1e6 && y0 > -1e6 && y0 < 1e6))
		return -EINVAL;
	int best = ls_resize_impl();
	if (impl == LS_IMPL_BEST) impl = best;
	if (impl < LS_IMPL_C || impl > best) return -ENOSYS;
	flip &= LS_FLIP_H | LS_FLIP_V;
	nhwc = nhwc != 0;
	int ret = tables(r, w, h, size, flip, x0, sx, y0, sy);
	if (ret) return ret;
	int n = 3 * w, s8 = (size + 7) & ~7, vp = r->vp, hp = r->hp;
	// mid: n elements written (rounded up to 16 by the SIMD kernels), and
	// from 3·first, 6·hp + 2 elements read by each output.
	if (grow(&r->mid, &r->midcap, (size_t)n + 6 * hp + 32, sizeof(int16_t)) ||
			grow(&r->acc, &r->acccap, (size_t)n, sizeof(int32_t)) ||
			grow(&r->row, &r->rowcap, (size_t)4 * s8, 1))
		return -ENOMEM;
	for (int y = 0; y < size; y++) {
		const uint8_t *s = src + (ptrdiff_t)r->vtab[2 * y] * stride;
		const int32_t *vw = r->vw + (size_t)y * vp;
		int cnt = r->vtab[2 * y + 1];
		switch (impl) {
#if LS_X86
		case LS_IMPL_AVX2: {
			vpass_avx2(s, stride, n, vw, cnt, r->mid);
			// Straight into the slot, but for the last row: the
			// stores run up to 29 bytes past the row (into the next
			// one, written later).
			if (y < size - 1 && size >= 16) {
				if (nhwc) hpass_avx2(r->mid, r->hoff, r->hw, hp, s8, NULL, NULL, 0, dst + (size_t)y * 3 * size);
				else hpass_avx2(r->mid, r->hoff, r->hw, hp, s8, NULL, dst + (size_t)y * size, (size_t)size * size, NULL);
			} else {
				hpass_avx2(r->mid, r->hoff, r->hw, hp, s8, r->row, NULL, 0, NULL);
				emit_avx2(r->row, dst, size, y, nhwc);
			}
			break;
		}
		case LS_IMPL_SSE2:
			vpass_sse2(s, stride, n, vw, cnt, r->mid);
			hpass_sse2(r->mid, r->hoff, r->hw, hp, s8, r->row);
			emit(r->row, dst, size, y, nhwc);
			break;
#endif
		default:
			vpass_c(s, stride, n, vw, cnt, r->acc, r->mid);
			hpass_c(r->mid, r->hoff, r->hw, hp, size, r->row);
			emit(r->row, dst, size, y, nhwc);
		}
	}
	return 0;
}
