package dataset

import (
	"context"
	"strings"
	"testing"

	"github.com/longshore/longshore/storage"
)

// columnValue is row r of c as a Value.
func columnValue(c *ColumnValues, r int) Value {
	if !c.Present[r] {
		return Value{}
	}
	switch c.Type {
	case FieldInt:
		return IntValue(c.Ints[r])
	case FieldFloat:
		return FloatValue(c.Floats[r])
	case FieldString:
		return StringValue(string(c.Bytes[r]))
	case FieldBytes:
		return BytesValue(c.Bytes[r])
	case FieldInts:
		return IntsValue(c.IntLists[r])
	case FieldFloats:
		return FloatsValue(c.FloatLists[r])
	case FieldStrings:
		return StringsValue(c.StringLists[r])
	}
	return Value{Type: c.Type}
}

// rowsOnly hides a catalog's ReadColumns: CatalogColumns reads it a row
// at a time.
type rowsOnly struct{ FieldCatalog }

// A batch's fields read by column are the rows' fields, for both
// catalogs (an index whose pieces hold an int where another holds a
// float, empty lists, absent fields) and for a catalog read by row; the
// buffers are reused from batch to batch.
func TestCatalogColumnsAreTheRows(t *testing.T) {
	ctx := context.Background()
	text := `{"key":"a","label":0,"n":1,"caption":"of a","tags":[],"box":[1,2]}
{"key":"b","label":1,"n":2,"box":[]}
{"key":"c","label":0,"n":2.5,"tags":["x","yz"],"meta":{"w":1,"h":[2,"z"]},"box":[0.5]}
{"key":"d","label":1,"blob":{"$base64":"AAE="}}
{"key":"e","label":0,"caption":"of e","tags":[],"box":[7]}
{"key":"f","label":0,"caption":"","tags":["q"],"n":-3}
`
	ds, err := ParseManifest(strings.NewReader(text), ManifestJSONL)
	if err != nil {
		t.Fatal(err)
	}
	s := storage.NewMemStore("cols")
	if _, err := s.Put(ctx, "m.jsonl", []byte(text), storage.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteManifestIndex(ctx, s, "m.jsonl", 2, nil); err != nil {
		t.Fatal(err)
	}
	m, err := OpenIndexedManifest(ctx, s, "m.jsonl", IndexedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	mem := DatasetCatalog(ds).(FieldCatalog)
	batches := [][]int64{{0, 1, 2, 3, 4, 5}, {5, 3, 1}, {2, 2, 0, 4, 1, 3, 5, 0}, {}, {4}}
	for name, cat := range map[string]FieldCatalog{"memory": mem, "indexed": m, "rows": rowsOnly{mem}} {
		var cols Columns
		for _, idx := range batches {
			if err := CatalogColumns(ctx, cat, idx, &cols); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			schema := cat.Schema()
			if cols.Rows != len(idx) || len(cols.Cols) != len(schema) {
				t.Fatalf("%s: %d rows, %d columns for %d and %s", name, cols.Rows, len(cols.Cols), len(idx), schema)
			}
			for r, i := range idx {
				want, err := CatalogFields(ctx, cat, i)
				if err != nil {
					t.Fatal(err)
				}
				for k := range schema {
					if got := columnValue(&cols.Cols[k], r); !got.Equal(want[k]) {
						t.Errorf("%s: batch %v row %d (sample %d) field %s: %v by column, %v by row", name, idx, r, i, schema[k].Name, got, want[k])
					}
				}
			}
		}
	}
}

// A catalog without fields reads no columns.
func TestCatalogColumnsWithoutFields(t *testing.T) {
	ds := &Dataset{Samples: []Sample{{Key: "a"}, {Key: "b"}}}
	cols := Columns{Cols: make([]ColumnValues, 3)}
	if err := CatalogColumns(context.Background(), DatasetCatalog(ds), []int64{1, 0}, &cols); err != nil || len(cols.Cols) != 0 || cols.Rows != 2 {
		t.Fatalf("%+v %v", cols, err)
	}
}
