package nvdecode

import (
	"errors"
	"sync"

	"github.com/longshore/longshore/gpu/nvjpeg"
)

// threads is the part a Service and a Device share: one device's OS
// threads, the engine's and the hybrid ones, each locked to its thread
// with a backend of its own (a Backend, or an Engine) made there, and
// stopped together by Close.
type threads struct {
	stop       chan struct{}
	finished   chan struct{} // closed once every thread has returned
	caps       nvjpeg.Caps
	noHardware string // why the device has no JPEG engine ("" when it has one)
	once       sync.Once
	errMu      sync.Mutex
	closeErr   []error
}

func newThreads() threads {
	return threads{stop: make(chan struct{}), finished: make(chan struct{}), caps: nvjpeg.DefaultCaps()}
}

// threadBackend is what the threads need of a Backend or an Engine.
type threadBackend interface {
	Hardware() (bool, string)
	Close() error
}

// startThreads starts t's engine thread and, once its backend is made
// (it decides t.caps.Hardware), hybrid hybrid threads. Each locks itself
// to its OS thread for good (the thread holds the device's handles),
// makes its backend there with newBackend (engine: the JPEG engine's
// thread) and, if that succeeded, runs engine or hybridRun with it; they
// close the backend (t.closed) when t.stop is closed. It returns the
// engine backend's error (no thread left running), else the hybrid
// backends' errors joined, after stopping the threads (t.close).
func startThreads[B threadBackend](t *threads, newBackend func(engine bool) (B, error), hybrid int, engine, hybridRun func(B)) error {
	var wg sync.WaitGroup
	started := make(chan error, 1+hybrid)
	run := func(isEngine bool, serve func(B)) {
		defer wg.Done()
		lockThread()
		b, err := newBackend(isEngine)
		if err == nil && isEngine {
			if ok, why := b.Hardware(); !ok {
				t.caps.Hardware = false
				t.noHardware = why
			}
		}
		started <- err
		if err == nil {
			serve(b)
		}
	}
	wg.Add(1)
	go run(true, engine)
	if err := <-started; err != nil { // the engine's first: it decides the caps
		wg.Wait()
		return err
	}
	wg.Add(hybrid)
	for range hybrid {
		go run(false, hybridRun)
	}
	var errs []error
	for range hybrid {
		errs = append(errs, <-started)
	}
	go func() { wg.Wait(); close(t.finished) }()
	if err := errors.Join(errs...); err != nil {
		t.close()
		return err
	}
	return nil
}

// closed closes a thread's backend, keeping its error for Close.
func (t *threads) closed(b threadBackend) {
	if err := b.Close(); err != nil {
		t.errMu.Lock()
		t.closeErr = append(t.closeErr, err)
		t.errMu.Unlock()
	}
}

// close stops the threads, waits for them and returns their backends'
// Close errors.
func (t *threads) close() error {
	t.once.Do(func() {
		close(t.stop)
		<-t.finished
	})
	t.errMu.Lock()
	defer t.errMu.Unlock()
	return errors.Join(t.closeErr...)
}
