package actors

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/longshore/longshore/actors/actorstest"
)

type nopDecoder struct{}

func (nopDecoder) Decode(data []byte, seed uint64, dst []byte) error { dst[0] = data[0]; return nil }
func (nopDecoder) Close() error                                      { return nil }

// BenchmarkPipelineOverhead measures the pipeline's own cost per sample:
// an in-memory store, a decoder that does nothing, tiny samples. ns/op is
// per sample.
func BenchmarkPipelineOverhead(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"defaults", Config{Sample: Shape{Height: 4, Width: 4}, Decoders: 2}},
		{"batch256-slots8", Config{BatchSize: 256, Slots: 8, Sample: Shape{Height: 4, Width: 4}, Decoders: 2}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const n = 4096
			st, ds := makeDataset(b, n, 10, 64)
			cfg := bc.cfg
			cfg.Epochs = (b.N + n - 1) / n
			p, err := NewLoader(cfg, ds, Deps{Store: st, NewDecoder: func() (SampleDecoder, error) { return nopDecoder{}, nil }, SampleSeed: actorstest.SampleSeed, Order: testOrder})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			b.ReportAllocs()
			b.ResetTimer()
			got := 0
			for got < b.N {
				bt, err := p.Next(context.Background())
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				got += bt.Len()
				bt.Release()
			}
			b.StopTimer()
			b.ReportMetric(float64(got)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}
