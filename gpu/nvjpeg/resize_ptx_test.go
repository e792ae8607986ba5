package nvjpeg

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestResizePTXWellFormed checks what can be checked of the kernel
// without a GPU (the driver compiles it at load time; a device run
// checks its pixels against the twin): every branch has its label, every
// register is within its declared range, and the kernel takes the eleven
// parameters EnqueueResize passes, in its order.
func TestResizePTXWellFormed(t *testing.T) {
	src := ResizePTX
	labels := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^(L_\w+):`).FindAllStringSubmatch(src, -1) {
		if labels[m[1]] {
			t.Errorf("label %s defined twice", m[1])
		}
		labels[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`bra (L_\w+);`).FindAllStringSubmatch(src, -1) {
		if !labels[m[1]] {
			t.Errorf("branch to %s, which is not defined", m[1])
		}
	}
	decl := map[string]int{}
	for _, m := range regexp.MustCompile(`\.reg \.\w+ %(\w+)<(\d+)>;`).FindAllStringSubmatch(src, -1) {
		decl[m[1]], _ = strconv.Atoi(m[2])
	}
	for _, m := range regexp.MustCompile(`%(rd|r|f|p)(\d+)\b`).FindAllStringSubmatch(src, -1) {
		n, _ := strconv.Atoi(m[2])
		if lim, ok := decl[m[1]]; !ok || n >= lim {
			t.Errorf("register %%%s%s outside its declaration (%%%s<%d>)", m[1], m[2], m[1], lim)
		}
	}
	var params []string
	for _, m := range regexp.MustCompile(`\.param \.(u32|u64) (p_\w+)`).FindAllStringSubmatch(src, -1) {
		params = append(params, m[1]+" "+m[2])
	}
	want := "u64 p_src,u32 p_pitch,u32 p_rx,u32 p_ry,u32 p_size,u32 p_flip,u32 p_nhwc,u64 p_tab,u32 p_kx,u32 p_ky,u64 p_dst"
	if got := strings.Join(params, ","); got != want {
		t.Errorf("parameters %s\nwant %s (EnqueueResize's order)", got, want)
	}
	for _, p := range params {
		name := strings.Fields(p)[1]
		if !strings.Contains(src, "["+name+"]") {
			t.Errorf("parameter %s is never loaded", name)
		}
	}
	if strings.Contains(src, "fma") || strings.Contains(src, "mad.f32") || strings.Contains(src, "mad.rn") {
		t.Error("a fused multiply-add: the twin rounds products and sums separately")
	}
}
