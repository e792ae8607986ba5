package faultproxy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/longshore/longshore/storage/faultproxy"
)

var body = bytes.Repeat([]byte("0123456789"), 1000)

func upstream(t *testing.T) *httptest.Server {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"e"`)
		if r.Header.Get("Range") != "" {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes 10-19/%d", len(body)))
			w.Header().Set("Content-Length", "10")
			w.WriteHeader(http.StatusPartialContent)
			w.Write(body[10:20])
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.Write(body)
	}))
	t.Cleanup(ts.Close)
	return ts
}

func get(t *testing.T, c *http.Client, url string, rng string) (*http.Response, []byte, error) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// TestRulesPickBySkipAndFirstN: a rule lets Skip requests by, disturbs
// the next FirstN of those it matches, and leaves other keys alone; the
// log names the rule.
func TestRulesPickBySkipAndFirstN(t *testing.T) {
	up := upstream(t)
	p := faultproxy.Start(t, up.URL, faultproxy.Rule{Name: "slow", Ops: faultproxy.OpGet, Key: faultproxy.HasSuffix(".jpg"),
		Skip: 1, FirstN: 2, Fault: faultproxy.SlowDown(2 * time.Second)})
	c := &http.Client{}
	var codes []int
	for range 5 {
		resp, _, err := get(t, c, p.URL+"/b/x.jpg", "")
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == 503 && resp.Header.Get("Retry-After") != "2" {
			t.Errorf("Retry-After %q; want 2", resp.Header.Get("Retry-After"))
		}
	}
	if fmt.Sprint(codes) != "[200 503 503 200 200]" {
		t.Errorf("status codes %v; want the 2nd and 3rd throttled", codes)
	}
	if resp, _, _ := get(t, c, p.URL+"/b/x.png", ""); resp.StatusCode != 200 {
		t.Errorf("another key: %d", resp.StatusCode)
	}
	if p.Fired(0) != 2 || p.Touched(0, "x.jpg") != 2 || p.Requests() != 6 {
		t.Errorf("fired %d, touched %d, requests %d", p.Fired(0), p.Touched(0, "x.jpg"), p.Requests())
	}
	log := p.Log()
	if len(log) != 6 || log[1].Rule != "slow" || log[0].Rule != "" || log[1].Op != faultproxy.OpGet || log[1].Key != "x.jpg" {
		t.Errorf("log %+v", log)
	}
}

// TestBodyFaults: what a client sees of each body fault.
func TestBodyFaults(t *testing.T) {
	up := upstream(t)
	for _, tc := range []struct {
		fault faultproxy.Fault
		rng   string
		check func(resp *http.Response, b []byte, err error) error
	}{
		{faultproxy.ResetAfter(100), "", func(_ *http.Response, b []byte, err error) error {
			if !errors.Is(err, syscall.ECONNRESET) || len(b) != 100 {
				return fmt.Errorf("%d bytes, %v; want 100 and a reset", len(b), err)
			}
			return nil
		}},
		{faultproxy.ShortBody(7), "", func(_ *http.Response, b []byte, err error) error {
			if !errors.Is(err, io.ErrUnexpectedEOF) || len(b) != len(body)-7 {
				return fmt.Errorf("%d bytes, %v; want %d and an unexpected EOF", len(b), err, len(body)-7)
			}
			return nil
		}},
		{faultproxy.Corrupt(3), "", func(_ *http.Response, b []byte, err error) error {
			diff := 0
			for i := range b {
				if b[i] != body[i] {
					diff++
				}
			}
			if err != nil || len(b) != len(body) || diff != 3 {
				return fmt.Errorf("%d bytes, %d differ, %v; want all, 3 flipped", len(b), diff, err)
			}
			return nil
		}},
		{faultproxy.WrongRange(5), "bytes=10-19", func(resp *http.Response, b []byte, err error) error {
			if err != nil || resp.Header.Get("Content-Range") != fmt.Sprintf("bytes 15-24/%d", len(body)) || bytes.Equal(b, body[10:20]) || len(b) != 10 {
				return fmt.Errorf("Content-Range %q, %q, %v", resp.Header.Get("Content-Range"), b, err)
			}
			return nil
		}},
	} {
		t.Run(tc.fault.Kind.String(), func(t *testing.T) {
			p := faultproxy.Start(t, up.URL, faultproxy.Rule{Fault: tc.fault})
			resp, b, err := get(t, &http.Client{}, p.URL+"/b/k", tc.rng)
			if err := tc.check(resp, b, err); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestRefuseThenListenAgain: after a Refuse, connections are refused
// until it is over, then served on the same address.
func TestRefuseThenListenAgain(t *testing.T) {
	up := upstream(t)
	p := faultproxy.Start(t, up.URL, faultproxy.Rule{FirstN: 1, Fault: faultproxy.Refuse(300 * time.Millisecond)})
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if _, _, err := get(t, c, p.URL+"/b/k", ""); err == nil {
		t.Fatal("the refusing request was answered")
	}
	if _, _, err := get(t, c, p.URL+"/b/k", ""); !errors.Is(err, syscall.ECONNREFUSED) && p.Refusing() {
		t.Errorf("while refusing: %v; want connection refused", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.WaitRefusal(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, b, err := get(t, c, p.URL+"/b/k", ""); err != nil || resp.StatusCode != 200 || !bytes.Equal(b, body) {
		t.Fatalf("after the refusal: %v", err)
	}
	if !strings.HasPrefix(p.URL, "http://127.0.0.1:") {
		t.Errorf("URL %s", p.URL)
	}
}

// TestHold: a held request waits at its gate, reported by Held; a client
// that gives up is reported by HungUp; once the gate opens a request is
// forwarded untouched.
func TestHold(t *testing.T) {
	up := upstream(t)
	g := faultproxy.NewGate()
	p := faultproxy.Start(t, up.URL, faultproxy.Rule{Ops: faultproxy.OpGet, Fault: faultproxy.Hold(g)})
	c := &http.Client{}
	wait := func(ch <-chan string, what string) string {
		t.Helper()
		select {
		case k := <-ch:
			return k
		case <-time.After(time.Minute): // a failure backstop only
			t.Fatalf("no %s", what)
			return ""
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/b/gone.jpg", nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	if k := wait(g.Held(), "held request"); k != "gone.jpg" {
		t.Fatalf("held %q", k)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled held request: %v", err)
	}
	if k := wait(g.HungUp(), "hang-up"); k != "gone.jpg" {
		t.Fatalf("hung up %q", k)
	}
	done := make(chan []byte, 1)
	go func() {
		_, b, err := get(t, c, p.URL+"/b/a.jpg", "")
		if err != nil {
			t.Error(err)
		}
		done <- b
	}()
	wait(g.Held(), "second held request")
	g.Open()
	if b := <-done; !bytes.Equal(b, body) {
		t.Errorf("after Open: %d bytes, want the upstream's %d", len(b), len(body))
	}
	if _, b, err := get(t, c, p.URL+"/b/c.jpg", ""); err != nil || !bytes.Equal(b, body) {
		t.Errorf("with the gate open: %d bytes, %v", len(b), err)
	}
}

// TestDelay: a delayed request is forwarded untouched, no sooner than
// its delay (a lower bound: a loaded machine only makes it later).
func TestDelay(t *testing.T) {
	up := upstream(t)
	p := faultproxy.Start(t, up.URL, faultproxy.Rule{Ops: faultproxy.OpGet, Fault: faultproxy.Delay(30 * time.Millisecond)})
	t0 := time.Now()
	resp, b, err := get(t, &http.Client{}, p.URL+"/b/a.jpg", "")
	if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(b, body) {
		t.Fatalf("delayed GET: %v %v, %d bytes", err, resp, len(b))
	}
	if d := time.Since(t0); d < 30*time.Millisecond {
		t.Errorf("answered after %v, before the 30 ms delay", d)
	}
}

// TestStallAt: a stalled body delivers its first N bytes, then holds (the
// gate reports it) until the gate opens, then the rest; a client that
// hangs up while it is held is reported.
func TestStallAt(t *testing.T) {
	up := upstream(t)
	g := faultproxy.NewGate()
	p := faultproxy.Start(t, up.URL, faultproxy.Rule{Ops: faultproxy.OpGet, FirstN: 2, Fault: faultproxy.StallAt(1000, g)})
	wait := func(ch <-chan string, what string) string {
		t.Helper()
		select {
		case k := <-ch:
			return k
		case <-time.After(time.Minute): // a failure backstop only
			t.Fatalf("no %s", what)
			return ""
		}
	}
	// The first client reads the 1000 bytes, then gives up.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/b/gone.jpg", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ContentLength != int64(len(body)) {
		t.Errorf("Content-Length %d; want the object's %d", resp.ContentLength, len(body))
	}
	head := make([]byte, 1000)
	if _, err := io.ReadFull(resp.Body, head); err != nil || !bytes.Equal(head, body[:1000]) {
		t.Fatalf("the first 1000 bytes: %v", err)
	}
	if k := wait(g.Held(), "stalled body"); k != "gone.jpg" {
		t.Fatalf("held %q", k)
	}
	cancel()
	resp.Body.Close()
	if k := wait(g.HungUp(), "hang-up"); k != "gone.jpg" {
		t.Fatalf("hung up %q", k)
	}
	// The second is let go: the whole body, as sent.
	done := make(chan []byte, 1)
	go func() {
		_, b, err := get(t, &http.Client{}, p.URL+"/b/a.jpg", "")
		if err != nil {
			t.Error(err)
		}
		done <- b
	}()
	wait(g.Held(), "second stalled body")
	g.Open()
	if b := <-done; !bytes.Equal(b, body) {
		t.Errorf("after Open: %d bytes, want the upstream's %d", len(b), len(body))
	}
}

// TestUnsized: the body comes without a Content-Length, whole.
func TestUnsized(t *testing.T) {
	up := upstream(t)
	p := faultproxy.Start(t, up.URL, faultproxy.Rule{Ops: faultproxy.OpGet, Fault: faultproxy.Unsized()})
	resp, b, err := get(t, &http.Client{}, p.URL+"/b/a.jpg", "")
	if err != nil || !bytes.Equal(b, body) {
		t.Fatalf("%d bytes, %v", len(b), err)
	}
	if resp.ContentLength != -1 || resp.Header.Get("Content-Length") != "" || len(resp.TransferEncoding) == 0 {
		t.Errorf("Content-Length %d (%q), Transfer-Encoding %v: want no length, chunked", resp.ContentLength, resp.Header.Get("Content-Length"), resp.TransferEncoding)
	}
}

// TestMixMaxPerKey: a Mix rule disturbs each request it picks with one of
// its faults, a key at most MaxPerKey times, the same schedule for a seed.
func TestMixMaxPerKey(t *testing.T) {
	up := upstream(t)
	schedule := func() []int {
		p := faultproxy.Start(t, up.URL, faultproxy.Rule{Ops: faultproxy.OpGet, MaxPerKey: 2, Seed: 5,
			Fault: faultproxy.Mix(faultproxy.Status(500, "InternalError"), faultproxy.SlowDown(0), faultproxy.ShortBody(3))})
		c := &http.Client{}
		var codes []int
		for i := range 12 {
			resp, b, err := get(t, c, fmt.Sprintf("%s/b/k%d", p.URL, i/4), "")
			switch {
			case err != nil && errors.Is(err, io.ErrUnexpectedEOF) && len(b) == len(body)-3:
				codes = append(codes, -1) // short
			case err != nil:
				t.Fatal(err)
			default:
				codes = append(codes, resp.StatusCode)
			}
		}
		for k := range 3 {
			if n := p.Touched(0, fmt.Sprintf("k%d", k)); n != 2 {
				t.Errorf("key k%d disturbed %d times; want 2", k, n)
			}
		}
		return codes
	}
	a, b := schedule(), schedule()
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("two runs of one seed: %v and %v", a, b)
	}
	kinds := map[int]bool{}
	for i, c := range a {
		if i%4 >= 2 && c != 200 {
			t.Errorf("request %d (a key's third or fourth): %d; want it passed", i, c)
		}
		if i%4 < 2 {
			kinds[c] = true
		}
	}
	t.Logf("schedule %v", a)
	if len(kinds) < 2 {
		t.Errorf("the mix drew one fault only: %v", a)
	}
}
