package main

import (
	"bufio"
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"sync"

	"github.com/longshore/longshore/dataset"
)

// A sink is where standalone mode hands delivered batches when no trainer is
// attached: it stands in for the trainer so a run can be checked from
// outside.
type sink interface {
	// Accept refuses a dataset whose keys the sink could not record.
	Accept(ds *dataset.Dataset) error
	// Deliver records one delivered sample; short marks a clip or
	// waveform shorter than its window (padded), pad a padding sample;
	// pixels are its decoded bytes in the batch (valid only during the
	// call).
	Deliver(epoch int, rank string, step int64, key string, short, pad bool, pixels []byte) error
	// Line appends a line as is (cluster mode's session and commit lines).
	Line(s string) error
	// Flush makes what was delivered so far reach the file (before a
	// commit is sent, so committed steps are never lost to a crash).
	Flush() error
	Close() error
}

// parseSink understands "null" and "log:PATH"; pixels makes a log sink
// record each sample's pixel digest.
func parseSink(spec string, pixels bool) (sink, error) {
	switch {
	case spec == "" || spec == "null":
		return nullSink{}, nil
	case strings.HasPrefix(spec, "log:"):
		path := strings.TrimPrefix(spec, "log:")
		if path == "" {
			return nil, fmt.Errorf("--sink log:PATH needs a path")
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("--sink %s: %w", spec, err)
		}
		return &logSink{f: f, w: bufio.NewWriterSize(f, 1<<16), pixels: pixels}, nil
	default:
		return nil, fmt.Errorf("--sink %q: want null or log:PATH", spec)
	}
}

type nullSink struct{}

func (nullSink) Accept(*dataset.Dataset) error                                { return nil }
func (nullSink) Deliver(int, string, int64, string, bool, bool, []byte) error { return nil }
func (nullSink) Line(string) error                                            { return nil }
func (nullSink) Flush() error                                                 { return nil }
func (nullSink) Close() error                                                 { return nil }

// logSink appends one line per delivered sample:
//
//	<epoch>\t<rank>\t<step>\t<key>
//
// with a column "short" for a clip or waveform shorter than its window
// (padded by repeating its last frame, or with silence), then a column
// "pad" for padding samples and, with --log-pixels, a last
// column "px:<16 hex digits>": the FNV-1a 64 digest of the sample's
// decoded bytes as the trainer got them, so runs can be compared pixel
// for pixel (the same job standalone and in a cluster, before and after a
// restart). In cluster mode <rank> is
// the rank's name, "<node>/<i>", and two more kinds of line appear:
//
//	session\t<rank>\t<session>      the rank's next lines belong to this session
//	commit\t<epoch>\t<rank>\t<step>  the coordinator acknowledged this commit
//
// Safe for concurrent use. Lines are buffered and
// flushed at Close (and whenever the buffer fills), so a crashed process may
// lose its tail: what matters for the guarantee is committed history, which
// is logged after the commit is acknowledged.
type logSink struct {
	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	pixels bool
}

// Accept refuses a dataset with a key holding a tab or a line break: its
// lines would not parse.
func (s *logSink) Accept(ds *dataset.Dataset) error {
	for _, smp := range ds.Samples {
		if strings.ContainsAny(smp.Key, "\t\n\r") {
			return fmt.Errorf("--sink log: sample key %q holds a tab or a line break, which the log's tab-separated lines cannot carry: rename it, or use --sink null or feed", smp.Key)
		}
	}
	return nil
}

func (s *logSink) Deliver(epoch int, rank string, step int64, key string, short, pad bool, pixels []byte) error {
	if strings.ContainsAny(key, "\t\n\r") { // Accept saw no sample list on the lazy path
		return fmt.Errorf("--sink log: sample key %q holds a tab or a line break, which the log's tab-separated lines cannot carry: rename it, or use --sink null or feed", key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, "%d\t%s\t%d\t%s", epoch, rank, step, key)
	if short {
		s.w.WriteString("\tshort")
	}
	if pad {
		s.w.WriteString("\tpad")
	}
	if s.pixels {
		h := fnv.New64a()
		h.Write(pixels)
		fmt.Fprintf(s.w, "\tpx:%016x", h.Sum64())
	}
	return s.w.WriteByte('\n')
}

func (s *logSink) Line(line string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := fmt.Fprintln(s.w, line)
	return err
}

func (s *logSink) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Flush()
}

func (s *logSink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.w.Flush()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	return err
}
