package decode

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// A transform as data: an ordered list of named operations with
// parameters, written as the node's --transform takes it:
//
//	random_resized_crop(scale=0.08:1,ratio=3/4:4/3)|hflip(p=0.5)|brightness(factor=0.6:1.4)
//
// Ops are separated by "|" and applied left to right; an op's parameters
// follow its name in parentheses, key=value, comma-separated (an op with
// no parameters may drop the parentheses). A value is a number, a
// fraction a/b (3/4 is Go's 3.0/4.0 exactly), or a range lo:hi of those.
// Spaces around the tokens are ignored. The names are torchvision's, in
// snake case.
//
// The geometric ops come first and are fused into the decode (the crop
// decoder reads only the pixels the filter needs; see SamplingFor), so
// they are a fixed set of shapes rather than free composition:
//
//	random_resized_crop(scale=lo:hi, ratio=lo:hi)   Train
//	resize(short=N) | center_crop [(size=S)]       Eval
//	resize                                         Resize
//
// each followed by [| hflip(p=P)] [| vflip(p=P)] (the flips in either
// order, drawn from their own streams whatever the geometry;
// resize(size=N) is resize(short=N) under torchvision's name). The
// output side is the sample spec's (Transform.Size, the node's --size),
// defined once: only
// center_crop(size=S) names it, as torchvision's CenterCrop(S) does, and
// then it must agree with the spec's (Transform.CropSize; the node takes
// it when --size is not given). The ops after the geometry are pixel ops on the decoded Size×Size sample, each drawing its
// randomness from the sample's seed and its place in the list (so adding
// one does not move another's draws, nor the crop's): see PixelOps.
//
// The last op may be normalize(mean=[r,g,b],std=[r,g,b]): torchvision's
// Normalize after ToTensor, applied as the sample is converted to the
// float dtype of Config.DType (see floatLUT); a list value is written in
// brackets.
//
// The presets are op lists: ParseTransform("train") is the Transform of
// Presets["train"], field for field what it always was.

// Op is one named operation of a transform with its parameters, in the
// order written.
type Op struct {
	Name   string
	Params []Param
}

// Param is one key=value parameter of an Op; Value is as written.
type Param struct{ Key, Value string }

func (o Op) String() string {
	if len(o.Params) == 0 {
		return o.Name
	}
	var b strings.Builder
	b.WriteString(o.Name)
	b.WriteByte('(')
	for i, p := range o.Params {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.Key)
		b.WriteByte('=')
		b.WriteString(p.Value)
	}
	b.WriteByte(')')
	return b.String()
}

// Ops is a transform as data: operations applied in order.
type Ops []Op

func (ops Ops) String() string {
	s := make([]string, len(ops))
	for i, o := range ops {
		s[i] = o.String()
	}
	return strings.Join(s, "|")
}

// Presets are the transforms the node's --transform has always named,
// as op lists.
var Presets = map[string]string{
	"train":  "random_resized_crop(scale=0.08:1,ratio=3/4:4/3)|hflip(p=0.5)",
	"eval":   "resize(short=256)|center_crop",
	"resize": "resize",
}

// ParseOps reads an op list (see the syntax above). It checks the
// syntax only; Compile checks the names and parameters.
func ParseOps(s string) (Ops, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("decode: empty transform")
	}
	var ops Ops
	for _, part := range strings.Split(s, "|") {
		part = strings.TrimSpace(part)
		name, rest, paren := strings.Cut(part, "(")
		name = strings.TrimSpace(name)
		if !isName(name) {
			return nil, fmt.Errorf("decode: transform %q: op %q: want a name like hflip or hflip(p=0.5)", s, part)
		}
		op := Op{Name: name}
		if paren {
			body, ok := strings.CutSuffix(strings.TrimSpace(rest), ")")
			if !ok || strings.ContainsAny(body, "()") {
				return nil, fmt.Errorf("decode: transform %q: op %q: unbalanced parentheses", s, part)
			}
			if strings.TrimSpace(body) != "" {
				kvs, ok := splitParams(body)
				if !ok {
					return nil, fmt.Errorf("decode: transform %q: op %q: unbalanced brackets", s, part)
				}
				for _, kv := range kvs {
					k, v, ok := strings.Cut(kv, "=")
					k, v = strings.TrimSpace(k), strings.TrimSpace(v)
					if !ok || !isName(k) || v == "" {
						return nil, fmt.Errorf("decode: transform %q: op %s: parameter %q: want key=value", s, name, strings.TrimSpace(kv))
					}
					op.Params = append(op.Params, Param{k, v})
				}
			}
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// splitParams splits an op's parameters at the commas outside brackets
// (a list [a,b,c] is one value); ok false if the brackets do not pair.
func splitParams(body string) (kvs []string, ok bool) {
	depth, start := 0, 0
	for i, r := range body {
		switch r {
		case '[':
			depth++
			if depth > 1 {
				return nil, false
			}
		case ']':
			depth--
			if depth < 0 {
				return nil, false
			}
		case ',':
			if depth == 0 {
				kvs = append(kvs, body[start:i])
				start = i + 1
			}
		}
	}
	return append(kvs, body[start:]), depth == 0
}

func isName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// params reads an op's parameters against the keys it takes.
type params struct {
	op   Op
	vals map[string]string
	errs []error
}

func readParams(op Op, keys ...string) *params {
	p := &params{op: op, vals: map[string]string{}}
	for _, kv := range op.Params {
		switch {
		case !contains(keys, kv.Key):
			if len(keys) == 0 {
				p.fail("takes no parameters, got %s", kv.Key)
			} else {
				p.fail("unknown parameter %s (want %s)", kv.Key, strings.Join(keys, ", "))
			}
		case p.vals[kv.Key] != "":
			p.fail("parameter %s given twice", kv.Key)
		default:
			p.vals[kv.Key] = kv.Value
		}
	}
	return p
}

func contains(keys []string, k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

func (p *params) fail(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("decode: op %s: "+format, append([]any{p.op.Name}, args...)...))
}

// number reads a number or a fraction a/b.
func number(s string) (float64, error) {
	if a, b, ok := strings.Cut(s, "/"); ok {
		x, err1 := strconv.ParseFloat(a, 64)
		y, err2 := strconv.ParseFloat(b, 64)
		if err1 != nil || err2 != nil || y == 0 {
			return 0, fmt.Errorf("%q is not a number or a fraction a/b", s)
		}
		return x / y, nil
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number or a fraction a/b", s)
	}
	return x, nil
}

// float reads key as one number; def when absent.
func (p *params) float(key string, def float64) float64 {
	s, ok := p.vals[key]
	if !ok {
		return def
	}
	x, err := number(s)
	if err != nil {
		p.fail("%s: %v", key, err)
	}
	return x
}

// int reads key as a whole number; def when absent.
func (p *params) int(key string, def int) int {
	s, ok := p.vals[key]
	if !ok {
		return def
	}
	x, err := strconv.Atoi(s)
	if err != nil {
		p.fail("%s: %q is not a whole number", key, s)
	}
	return x
}

// channels reads key as one number (every channel) or a list [r,g,b] of
// three; def when absent.
func (p *params) channels(key string) (v [3]float64) {
	s := p.vals[key]
	items := []string{s}
	if body, ok := strings.CutPrefix(s, "["); ok {
		body, ok = strings.CutSuffix(body, "]")
		if !ok {
			p.fail("%s: %q: unbalanced brackets", key, s)
			return v
		}
		items = strings.Split(body, ",")
	}
	if len(items) != 1 && len(items) != 3 {
		p.fail("%s: %q: want one value or three, [r,g,b]", key, s)
		return v
	}
	for i := range v {
		x, err := number(strings.TrimSpace(items[min(i, len(items)-1)]))
		if err != nil {
			p.fail("%s: %v", key, err)
			return v
		}
		v[i] = x
	}
	return v
}

// span reads key as lo:hi (or one number, lo = hi); def when absent.
func (p *params) span(key string, lo, hi float64) (float64, float64) {
	s, ok := p.vals[key]
	if !ok {
		return lo, hi
	}
	a, b, isRange := strings.Cut(s, ":")
	x, err := number(a)
	if err != nil {
		p.fail("%s: %v", key, err)
		return lo, hi
	}
	y := x
	if isRange {
		if y, err = number(b); err != nil {
			p.fail("%s: %v", key, err)
			return lo, hi
		}
	}
	return x, y
}

// Compile turns an op list into the Transform it describes: its
// geometric ops fused into Kind and the geometry fields (Size stays the
// sample spec's, 224 unless changed), the rest kept in order as
// Transform.Pixel. Every problem is reported at once.
func (ops Ops) Compile() (Transform, error) {
	t := defaultTransform()
	var errs []error
	add := func(p *params) { errs = append(errs, p.errs...) }
	i := 0
	geometry := func() string {
		if i >= len(ops) {
			return ""
		}
		return ops[i].Name
	}
	// The flips, each at most once, in either order (they commute):
	// RandomHorizontalFlip and RandomVerticalFlip after the geometry,
	// whichever it is. Without hflip, no horizontal flip.
	flips := func() {
		for seen := map[string]bool{}; (geometry() == "hflip" || geometry() == "vflip") && !seen[geometry()]; i++ {
			name := geometry()
			seen[name] = true
			p := readParams(ops[i], "p")
			prob := p.float("p", 0.5)
			if !(prob >= 0 && prob <= 1) {
				p.fail("p %v out of [0, 1]", prob)
			}
			if name == "hflip" {
				t.FlipProb = prob
			} else {
				t.VFlipProb = prob
			}
			add(p)
		}
	}
	switch geometry() {
	case "random_resized_crop":
		t.Geometry = Train
		p := readParams(ops[i], "scale", "ratio")
		t.ScaleMin, t.ScaleMax = p.span("scale", t.ScaleMin, t.ScaleMax)
		t.RatioMin, t.RatioMax = p.span("ratio", t.RatioMin, t.RatioMax)
		add(p)
		i++
		flips()
	case "resize":
		// resize(short=N), or torchvision's own name: Resize(size=N)
		// with one number resizes the short side to N.
		p := readParams(ops[i], "short", "size")
		_, short := p.vals["short"]
		_, size := p.vals["size"]
		if !short && !size {
			t.Geometry = Resize
			add(p)
			i++
			flips()
			break
		}
		t.Geometry = Eval
		if short && size {
			p.fail("short and size are the same (the short side): give one")
		}
		t.ResizeShort = p.int("short", p.int("size", t.ResizeShort))
		add(p)
		i++
		if geometry() != "center_crop" {
			errs = append(errs, errors.New("decode: op resize(short=N) is followed by center_crop (torchvision's Resize(N) then CenterCrop(size), fused into the decode)"))
			break
		}
		// center_crop(size=N): CenterCrop(N), the output side; without
		// it, the sample spec's (--size).
		p = readParams(ops[i], "size")
		if _, ok := p.vals["size"]; ok {
			t.CropSize = p.int("size", 0)
			if t.CropSize < 1 {
				p.fail("size %d: want a positive side", t.CropSize)
			}
			t.Size = t.CropSize
		}
		add(p)
		i++
		flips()
	default:
		errs = append(errs, fmt.Errorf("decode: transform %q: it starts with its geometry, fused into the decode: random_resized_crop, resize(short=N) | center_crop, or resize, each followed by [| hflip] [| vflip]", ops.String()))
	}
	for ; i < len(ops); i++ {
		if ops[i].Name == "normalize" {
			if i != len(ops)-1 {
				errs = append(errs, fmt.Errorf("decode: transform %q: op normalize is the last op (it converts the sample to floats; the pixel ops work on bytes)", ops.String()))
				continue
			}
			p := readParams(ops[i], "mean", "std")
			_, hasMean := p.vals["mean"]
			_, hasStd := p.vals["std"]
			if !hasMean || !hasStd {
				p.fail("needs mean and std, one value or three each (ImageNet's: %s)", imagenetNormalize)
			} else {
				t.Normalize, t.Mean, t.Std = true, p.channels("mean"), p.channels("std")
				for ch, sd := range t.Std {
					if len(p.errs) == 0 && (!(sd > 0) || math.IsInf(sd, 0) || math.IsInf(t.Mean[ch], 0)) {
						p.fail("std %v, mean %v: want finite values, std > 0", t.Std, t.Mean)
					}
				}
			}
			add(p)
			continue
		}
		if geometricOps[ops[i].Name] {
			errs = append(errs, fmt.Errorf("decode: transform %q: op %s: the geometric ops are fused into the decode and come first, in one of the shapes random_resized_crop, resize(short=N) | center_crop, or resize, each followed by [| hflip] [| vflip]", ops.String(), ops[i].Name))
			continue
		}
		if _, err := compilePixelOp(ops[i]); err != nil {
			errs = append(errs, err)
			continue
		}
		t.Pixel = append(t.Pixel, ops[i])
	}
	if err := errors.Join(errs...); err != nil {
		return Transform{}, err
	}
	return t, nil
}

var geometricOps = map[string]bool{"random_resized_crop": true, "hflip": true, "vflip": true, "resize": true, "center_crop": true}

// Ops is t as an op list: the geometry its Kind fuses, then its pixel
// ops. Compiling it gives t back (Size aside: the spec's).
func (t Transform) Ops() Ops {
	num := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	var ops Ops
	switch t.Geometry {
	case Train:
		ops = append(ops, Op{"random_resized_crop", []Param{
			{"scale", num(t.ScaleMin) + ":" + num(t.ScaleMax)}, {"ratio", num(t.RatioMin) + ":" + num(t.RatioMax)}}})
	case Eval:
		crop := Op{Name: "center_crop"}
		if t.CropSize != 0 {
			crop.Params = []Param{{"size", strconv.Itoa(t.CropSize)}}
		}
		ops = append(ops, Op{"resize", []Param{{"short", strconv.Itoa(t.ResizeShort)}}}, crop)
	default:
		ops = append(ops, Op{Name: "resize"})
	}
	if t.FlipProb > 0 {
		ops = append(ops, Op{"hflip", []Param{{"p", num(t.FlipProb)}}})
	}
	if t.VFlipProb > 0 {
		ops = append(ops, Op{"vflip", []Param{{"p", num(t.VFlipProb)}}})
	}
	ops = append(ops, t.Pixel...)
	if t.Normalize {
		list := func(v [3]float64) string { return "[" + num(v[0]) + "," + num(v[1]) + "," + num(v[2]) + "]" }
		ops = append(ops, Op{"normalize", []Param{{"mean", list(t.Mean)}, {"std", list(t.Std)}}})
	}
	return ops
}

// imagenetNormalize is the normalize op with ImageNet's mean and std,
// what torchvision's ImageNet recipes use.
const imagenetNormalize = "normalize(mean=[0.485,0.456,0.406],std=[0.229,0.224,0.225])"
