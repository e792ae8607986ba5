package dataset

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A JSON value's field (docs/fields.md):
//
//	integer (no fraction, no exponent, fits int64) → int
//	other number                                   → float
//	string                                         → string
//	true / false                                   → int 1 / 0
//	null                                           → absent
//	array of integers                              → list<int>
//	array of numbers                               → list<float>
//	array of strings                               → list<string>
//	{"$base64": "..."} (that one member)           → bytes
//	any other object or array (mixed, nested)      → string, its JSON text
//
// An empty array is a list whose element type the other samples give.

// jsonBytesMember is the one member of an object that encodes bytes.
const jsonBytesMember = "$base64"

// jsonFieldValue is the field value of the JSON text raw.
func jsonFieldValue(raw []byte) (Value, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return Value{}, nil
	}
	switch c := raw[0]; {
	case c == 'n':
		return Value{}, nil
	case c == 't':
		return IntValue(1), nil
	case c == 'f':
		return IntValue(0), nil
	case c == '"':
		s, err := jsonString(raw)
		if err != nil {
			return Value{}, err
		}
		return StringValue(string(s)), nil
	case c == '-' || (c >= '0' && c <= '9'):
		return jsonNumber(raw)
	case c == '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			return Value{}, err
		}
		return jsonList(raw, elems)
	case c == '{':
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return Value{}, err
		}
		if b, ok := obj[jsonBytesMember]; ok && len(obj) == 1 {
			var text string
			if err := json.Unmarshal(b, &text); err != nil {
				return Value{}, fmt.Errorf("%s: want a base64 string: %v", jsonBytesMember, err)
			}
			data, err := base64.StdEncoding.DecodeString(text)
			if err != nil {
				return Value{}, fmt.Errorf("%s: %v", jsonBytesMember, err)
			}
			return BytesValue(data), nil
		}
		return compactJSON(raw)
	}
	return Value{}, fmt.Errorf("not a JSON value: %.40q", raw)
}

func jsonNumber(raw []byte) (Value, error) {
	if v, ok := parseDecimal(raw); ok && raw[0] != '+' {
		return IntValue(v), nil
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return Value{}, fmt.Errorf("number %s: %v", raw, err)
	}
	return FloatValue(f), nil
}

// jsonList is the value of an array: a list if its elements are all
// integers, all numbers or all strings; else its JSON text.
func jsonList(raw []byte, elems []json.RawMessage) (Value, error) {
	if len(elems) == 0 {
		return IntsValue([]int64{}), nil
	}
	vals := make([]Value, len(elems))
	kind := FieldType(0)
	for i, e := range elems {
		e = bytes.TrimSpace(e)
		if len(e) == 0 || !(e[0] == '"' || e[0] == '-' || (e[0] >= '0' && e[0] <= '9')) {
			return compactJSON(raw)
		}
		v, err := jsonFieldValue(e)
		if err != nil {
			return Value{}, err
		}
		vals[i] = v
		switch {
		case kind == 0:
			kind = v.Type
		case kind != v.Type:
			if w := widen(kind, v.Type); w == FieldFloat {
				kind = w
			} else {
				return compactJSON(raw)
			}
		}
	}
	switch kind {
	case FieldInt:
		out := make([]int64, len(vals))
		for i, v := range vals {
			out[i] = v.Int
		}
		return IntsValue(out), nil
	case FieldFloat:
		out := make([]float64, len(vals))
		for i, v := range vals {
			v, _ = v.as(FieldFloat)
			out[i] = v.Float
		}
		return FloatsValue(out), nil
	default:
		out := make([]string, len(vals))
		for i, v := range vals {
			out[i] = v.Str
		}
		return StringsValue(out), nil
	}
}

func compactJSON(raw []byte) (Value, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return Value{}, err
	}
	return StringValue(b.String()), nil
}

// NamedValue is a field's value with the field's name: a row's field as
// a source reads it.
type NamedValue struct {
	Name  string
	Value Value
}

// jsonObjectFields returns the fields of a JSON object's members but
// those named as one of skip (without regard to case, as encoding/json
// matches them: "Key" is the key), sorted by name; a member that is not
// a field's value is an error naming it.
func jsonObjectFields(obj map[string]json.RawMessage, skip []string, prefix string, out []NamedValue) ([]NamedValue, error) {
	names := make([]string, 0, len(obj))
	for name := range obj {
		if !slices.ContainsFunc(skip, func(s string) bool { return strings.EqualFold(s, name) }) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		v, err := jsonFieldValue(obj[name])
		if err != nil {
			return out, fmt.Errorf("field %q: %v", prefix+name, err)
		}
		if !v.Present() {
			continue
		}
		out = append(out, NamedValue{Name: prefix + name, Value: v})
	}
	return out, nil
}

// appendJSONValue appends v as JSON, the way jsonFieldValue reads it
// back (a float that is integral keeps a ".0"; bytes as {"$base64": ...}).
func appendJSONValue(b []byte, v Value) []byte {
	switch v.Type {
	case FieldInt:
		return strconv.AppendInt(b, v.Int, 10)
	case FieldFloat:
		return appendJSONFloat(b, v.Float)
	case FieldString:
		s, _ := json.Marshal(v.Str)
		return append(b, s...)
	case FieldBytes:
		b = append(b, `{"`+jsonBytesMember+`":"`...)
		b = base64.StdEncoding.AppendEncode(b, v.Bytes)
		return append(b, `"}`...)
	case FieldInts:
		return appendList(b, v.Ints, func(b []byte, x int64) []byte { return strconv.AppendInt(b, x, 10) })
	case FieldFloats:
		return appendList(b, v.Floats, func(b []byte, x float64) []byte { return appendJSONFloat(b, x) })
	case FieldStrings:
		s, _ := json.Marshal(v.Strings)
		return append(b, s...)
	}
	return append(b, "null"...)
}

func appendJSONFloat(b []byte, f float64) []byte {
	start := len(b)
	b = strconv.AppendFloat(b, f, 'g', -1, 64)
	if !bytes.ContainsAny(b[start:], ".eEnN") {
		b = append(b, ".0"...)
	}
	return b
}

// jsonWritable reports why v cannot be written as JSON that reads back
// as v: a float that is NaN or infinite, text that is not UTF-8.
func jsonWritable(v Value) error {
	for _, f := range append([]float64{v.Float}, v.Floats...) {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("float %v has no JSON", f)
		}
	}
	for _, s := range append([]string{v.Str}, v.Strings...) {
		if !utf8.ValidString(s) {
			return fmt.Errorf("%q is not valid UTF-8, which JSON cannot carry", s)
		}
	}
	return nil
}
