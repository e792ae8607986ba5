/* jpegs: the JPEGs of testdata/hostile that PIL cannot write, through
 * libjpeg(-turbo) itself.
 *
 *   jpegs arith IN.ppm OUT.jpg       arithmetic-coded baseline (SOF9)
 *   jpegs scans IN.ppm OUT.jpg       progressive, one scan per coefficient
 *                                    and bit: 3 x 63 x 11 + 1 = 2,080 scans
 *
 * Build: cc -O2 -o jpegs jpegs.c -ljpeg (scripts/hostile/make.py does).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>

static unsigned char *read_ppm(const char *path, int *w, int *h) {
	FILE *in = fopen(path, "rb");
	int max;
	if (!in || fscanf(in, "P6 %d %d %d", w, h, &max) != 3) return NULL;
	fgetc(in);
	unsigned char *rgb = malloc((size_t)*w * *h * 3);
	if (fread(rgb, 3, (size_t)*w * *h, in) != (size_t)*w * *h) return NULL;
	fclose(in);
	return rgb;
}

int main(int argc, char **argv) {
	if (argc != 4) return 2;
	int w, h;
	unsigned char *rgb = read_ppm(argv[2], &w, &h);
	FILE *out = fopen(argv[3], "wb");
	if (!rgb || !out) return 1;
	struct jpeg_compress_struct c;
	struct jpeg_error_mgr e;
	c.err = jpeg_std_error(&e);
	jpeg_create_compress(&c);
	jpeg_stdio_dest(&c, out);
	c.image_width = w;
	c.image_height = h;
	c.input_components = 3;
	c.in_color_space = JCS_RGB;
	jpeg_set_defaults(&c);
	jpeg_set_quality(&c, 90, TRUE);
	jpeg_scan_info *scans = NULL;
	if (strcmp(argv[1], "arith") == 0) {
		c.arith_code = TRUE;
	} else if (strcmp(argv[1], "scans") == 0) {
		/* DC of all components in one scan, then for each component and
		 * AC coefficient k: a first scan at Al=10 (the most libjpeg allows
		 * at 8 bits) and 10 refinements: 2,080 scans. */
		int n = 0, max = 1 + 3 * 63 * 11;
		scans = calloc(max, sizeof *scans);
		scans[n].comps_in_scan = 3;
		for (int ci = 0; ci < 3; ci++) scans[n].component_index[ci] = ci;
		n++;
		for (int ci = 0; ci < 3; ci++)
			for (int k = 1; k < 64; k++)
				for (int al = 10; al >= 0; al--) {
					jpeg_scan_info *s = &scans[n++];
					s->comps_in_scan = 1;
					s->component_index[0] = ci;
					s->Ss = s->Se = k;
					s->Ah = al == 10 ? 0 : al + 1;
					s->Al = al;
				}
		c.scan_info = scans;
		c.num_scans = n;
	} else {
		return 2;
	}
	jpeg_start_compress(&c, TRUE);
	while (c.next_scanline < c.image_height) {
		JSAMPROW row = rgb + (size_t)c.next_scanline * w * 3;
		jpeg_write_scanlines(&c, &row, 1);
	}
	jpeg_finish_compress(&c);
	jpeg_destroy_compress(&c);
	fclose(out);
	free(scans);
	free(rgb);
	return 0;
}
