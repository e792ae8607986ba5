package nvjpeg

// ResizePTX is the device resize (crop, antialiased bilinear resize and
// flip of one decoded RGB picture into one uint8 sample), written in
// PTX so that the driver compiles it for the GPU at load time
// (cuModuleLoadData): Debian's CUDA 11.8 packages carry no nvcc, and
// nothing else is needed to build it. actors/nvdecode's ResizePlan is
// its plan and its twin: ResizePlan.Resize does this arithmetic in Go,
// product by product and sum by sum in float32 (mul.rn and add.rn here:
// rounded separately, never fused), so the twin's pixels are the
// kernel's.
//
// One thread per output pixel (its three channels): idx = oy·size + ox.
// Parameters: src (the picture, pitch bytes a row), the region's origin
// (rx, ry) in it, size, flip, nhwc, the tables tab and their widths kx,
// ky, and dst (3·size² bytes). tab holds, as 4-byte words: the columns'
// first tap and tap count (size each), the rows' (size each), the
// columns' weights (size·kx floats) and the rows' (size·ky floats).
// Output column i (before the flip) reads region columns first..first+
// count-1 with its weights; the output written at ox is column size-1-ox
// when flipped. Each value is floor(Σ_rows wy·(Σ_cols wx·src) + 0.5)
// clamped to 0..255.
const ResizePTX = `
.version 7.0
.target sm_70
.address_size 64

.visible .entry ls_resize(
	.param .u64 p_src,
	.param .u32 p_pitch,
	.param .u32 p_rx,
	.param .u32 p_ry,
	.param .u32 p_size,
	.param .u32 p_flip,
	.param .u32 p_nhwc,
	.param .u64 p_tab,
	.param .u32 p_kx,
	.param .u32 p_ky,
	.param .u64 p_dst
)
{
	.reg .pred %p<8>;
	.reg .b32 %r<48>;
	.reg .b64 %rd<32>;
	.reg .f32 %f<16>;

	ld.param.u64 %rd1, [p_src];
	ld.param.u32 %r1, [p_pitch];
	ld.param.u32 %r2, [p_rx];
	ld.param.u32 %r3, [p_ry];
	ld.param.u32 %r4, [p_size];
	ld.param.u32 %r5, [p_flip];
	ld.param.u32 %r6, [p_nhwc];
	ld.param.u64 %rd2, [p_tab];
	ld.param.u32 %r7, [p_kx];
	ld.param.u32 %r8, [p_ky];
	ld.param.u64 %rd3, [p_dst];
	cvta.to.global.u64 %rd1, %rd1;
	cvta.to.global.u64 %rd2, %rd2;
	cvta.to.global.u64 %rd3, %rd3;

	mov.u32 %r9, %ctaid.x;
	mov.u32 %r10, %ntid.x;
	mov.u32 %r11, %tid.x;
	mad.lo.u32 %r12, %r9, %r10, %r11;
	mul.lo.u32 %r13, %r4, %r4;
	setp.ge.u32 %p1, %r12, %r13;
	@%p1 bra L_done;
	div.u32 %r14, %r12, %r4;
	rem.u32 %r15, %r12, %r4;
	sub.u32 %r16, %r4, 1;
	sub.u32 %r16, %r16, %r15;
	setp.ne.u32 %p2, %r5, 0;
	selp.u32 %r17, %r16, %r15, %p2;

	mul.wide.u32 %rd4, %r17, 4;
	add.u64 %rd5, %rd2, %rd4;
	ld.global.u32 %r18, [%rd5];
	mul.wide.u32 %rd6, %r4, 4;
	add.u64 %rd7, %rd5, %rd6;
	ld.global.u32 %r19, [%rd7];
	mul.wide.u32 %rd8, %r14, 4;
	add.u64 %rd9, %rd2, %rd8;
	shl.b64 %rd10, %rd6, 1;
	add.u64 %rd11, %rd9, %rd10;
	ld.global.u32 %r20, [%rd11];
	add.u64 %rd12, %rd11, %rd6;
	ld.global.u32 %r21, [%rd12];

	shl.b64 %rd13, %rd6, 2;
	add.u64 %rd14, %rd2, %rd13;
	mul.lo.u32 %r22, %r17, %r7;
	mul.wide.u32 %rd15, %r22, 4;
	add.u64 %rd16, %rd14, %rd15;
	mul.lo.u32 %r23, %r4, %r7;
	mul.wide.u32 %rd17, %r23, 4;
	add.u64 %rd18, %rd14, %rd17;
	mul.lo.u32 %r24, %r14, %r8;
	mul.wide.u32 %rd19, %r24, 4;
	add.u64 %rd20, %rd18, %rd19;

	add.u32 %r25, %r3, %r20;
	add.u32 %r26, %r2, %r18;
	mul.lo.u32 %r26, %r26, 3;
	cvt.u64.u32 %rd22, %r26;
	mov.f32 %f1, 0f00000000;
	mov.f32 %f2, 0f00000000;
	mov.f32 %f3, 0f00000000;
	mov.u32 %r27, 0;
L_rows:
	setp.ge.u32 %p3, %r27, %r21;
	@%p3 bra L_rows_done;
	add.u32 %r28, %r25, %r27;
	mul.wide.u32 %rd21, %r28, %r1;
	add.u64 %rd21, %rd21, %rd22;
	add.u64 %rd21, %rd1, %rd21;
	mov.f32 %f4, 0f00000000;
	mov.f32 %f5, 0f00000000;
	mov.f32 %f6, 0f00000000;
	mov.u64 %rd23, %rd16;
	mov.u32 %r29, 0;
L_cols:
	setp.ge.u32 %p4, %r29, %r19;
	@%p4 bra L_cols_done;
	ld.global.f32 %f7, [%rd23];
	ld.global.u8 %r30, [%rd21];
	ld.global.u8 %r31, [%rd21+1];
	ld.global.u8 %r32, [%rd21+2];
	cvt.rn.f32.u32 %f8, %r30;
	cvt.rn.f32.u32 %f9, %r31;
	cvt.rn.f32.u32 %f10, %r32;
	mul.rn.f32 %f8, %f7, %f8;
	mul.rn.f32 %f9, %f7, %f9;
	mul.rn.f32 %f10, %f7, %f10;
	add.rn.f32 %f4, %f4, %f8;
	add.rn.f32 %f5, %f5, %f9;
	add.rn.f32 %f6, %f6, %f10;
	add.u64 %rd23, %rd23, 4;
	add.u64 %rd21, %rd21, 3;
	add.u32 %r29, %r29, 1;
	bra L_cols;
L_cols_done:
	mul.wide.u32 %rd24, %r27, 4;
	add.u64 %rd24, %rd20, %rd24;
	ld.global.f32 %f11, [%rd24];
	mul.rn.f32 %f4, %f11, %f4;
	mul.rn.f32 %f5, %f11, %f5;
	mul.rn.f32 %f6, %f11, %f6;
	add.rn.f32 %f1, %f1, %f4;
	add.rn.f32 %f2, %f2, %f5;
	add.rn.f32 %f3, %f3, %f6;
	add.u32 %r27, %r27, 1;
	bra L_rows;
L_rows_done:
	add.rn.f32 %f1, %f1, 0f3F000000;
	add.rn.f32 %f2, %f2, 0f3F000000;
	add.rn.f32 %f3, %f3, 0f3F000000;
	cvt.rmi.f32.f32 %f1, %f1;
	cvt.rmi.f32.f32 %f2, %f2;
	cvt.rmi.f32.f32 %f3, %f3;
	max.f32 %f1, %f1, 0f00000000;
	max.f32 %f2, %f2, 0f00000000;
	max.f32 %f3, %f3, 0f00000000;
	min.f32 %f1, %f1, 0f437F0000;
	min.f32 %f2, %f2, 0f437F0000;
	min.f32 %f3, %f3, 0f437F0000;
	cvt.rzi.u32.f32 %r33, %f1;
	cvt.rzi.u32.f32 %r34, %f2;
	cvt.rzi.u32.f32 %r35, %f3;
	setp.ne.u32 %p5, %r6, 0;
	@%p5 bra L_nhwc;
	cvt.u64.u32 %rd25, %r12;
	add.u64 %rd25, %rd3, %rd25;
	cvt.u64.u32 %rd26, %r13;
	st.global.u8 [%rd25], %r33;
	add.u64 %rd25, %rd25, %rd26;
	st.global.u8 [%rd25], %r34;
	add.u64 %rd25, %rd25, %rd26;
	st.global.u8 [%rd25], %r35;
	bra L_done;
L_nhwc:
	mul.wide.u32 %rd27, %r12, 3;
	add.u64 %rd27, %rd3, %rd27;
	st.global.u8 [%rd27], %r33;
	st.global.u8 [%rd27+1], %r34;
	st.global.u8 [%rd27+2], %r35;
L_done:
	ret;
}
`

// ResizeThreads is the kernel's block size (one thread per output
// pixel; size² threads in ceil(size²/ResizeThreads) blocks).
const ResizeThreads = 256
