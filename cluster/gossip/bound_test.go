package gossip

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"
)

// encryptedHeader starts a stream as an encrypted memberlist message of
// n more bytes would (memberlist's encryptMsg type, then the length):
// memberlist reads all n before it can decrypt, and so authenticate, any.
func encryptedHeader(n uint32) []byte {
	const encryptMsg = 10 // memberlist's messageType
	return binary.BigEndian.AppendUint32([]byte{encryptMsg}, n)
}

func startBounded(t *testing.T, id string, c Config, join ...string) *Membership {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), backstop)
	defer cancel()
	c.Meta = Meta{ID: id, Role: RoleNode, ActorAddr: "127.0.0.1:9"}
	c.BindAddr = "127.0.0.1:0"
	c.Join = join
	c.Keys = [][]byte{bytes.Repeat([]byte{7}, 32)}
	m, err := Start(ctx, c)
	if err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	return m
}

// flood opens n streams to addr, each claiming an encrypted message of
// 16 MiB and sending size bytes of garbage after it, and reports how
// many the member read whole.
func flood(t *testing.T, addr string, n, size int) int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	whole := 0
	garbage := make([]byte, size)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return // refused at once
			}
			defer c.Close()
			c.SetWriteDeadline(time.Now().Add(backstop)) // a failure backstop only
			if _, err := c.Write(append(encryptedHeader(16<<20), garbage...)); err == nil {
				mu.Lock()
				whole++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return whole
}

// TestGossipStreamFlood: of streams that claim a huge encrypted message,
// a member holds at most MaxInboundStreams at once and refuses the rest,
// cuts each off at MaxStreamBytes (it never reads 8 MiB of one), and
// still gossips with real members afterwards.
func TestGossipStreamFlood(t *testing.T) {
	bounds := Config{Profile: "lan", MaxInboundStreams: 4, MaxStreamBytes: 64 << 10} // lan: a 10 s stream deadline, time to read it all
	a := startBounded(t, "a", bounds)
	defer shutdown(t, a)
	const n = 20
	if whole := flood(t, a.Addr(), n, 8<<20); whole != 0 {
		t.Errorf("%d of %d streams of 8 MiB garbage were read whole before authentication", whole, n)
	}
	deadline := time.Now().Add(backstop) // a failure backstop only
	for a.StreamStats().Open != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	st := a.StreamStats()
	accepted := n - st.Refused
	// Each of the 4 places is taken again as a cut stream ends, so how
	// many are refused depends on the timing; that none is held past
	// the bounds does not.
	if st.Open != 0 || st.Peak > 4 || st.Peak < 1 || st.Truncated != accepted {
		t.Errorf("streams %+v: want none open, at most 4 at once, every accepted one (%d) cut off", st, accepted)
	}
	t.Logf("after the flood: %+v", st)
	b := startBounded(t, "b", bounds, a.Addr())
	defer shutdown(t, b)
	waitFor(t, a, "b joined", is(Joined, "b"))
	if err := b.UpdateMeta(context.Background(), func(m *Meta) { m.Incarnation = 9 }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, a, "b's update", func(e Event) bool { return e.Kind == Updated && e.Name == "b" && e.Meta.Incarnation == 9 })
	if got := a.StreamStats(); got.Truncated != st.Truncated || got.Refused != st.Refused {
		t.Errorf("a real member's streams were refused or cut: %+v, after the flood %+v", got, st)
	}
}
