package wire_test

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/longshore/longshore/cluster"
	"github.com/longshore/longshore/cluster/wire"
)

// FuzzWire decodes arbitrary bytes as each message a peer may send and
// converts what decodes to package cluster's types: no input may panic
// (conversions are total: missing fields are zero values), and
// converting back and forth again is stable, so what a node sends is
// what the coordinator steps. The first byte picks the message.
func FuzzWire(f *testing.F) {
	add := func(kind byte, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{kind}, b...))
	}
	fence := cluster.Fence{Incarnation: 3, Seq: 9}
	for i, ev := range []cluster.Event{
		cluster.Request{Rank: "n/0", Session: fence, Epoch: 1, Through: 5},
		cluster.Progress{Rank: "n/0", Session: fence, Lease: fence, Through: 7},
		cluster.LeaseDone{Rank: "n/1", Session: fence, Lease: fence, Through: 8},
		cluster.Commit{Rank: "n/0", Session: fence, Epoch: 2, Lease: fence, Through: 3, Offset: 64, Step: 2},
		cluster.Reset{Rank: "n/0", Session: fence},
		cluster.Commit{Rank: "n/0", Session: fence, Epoch: 2, Lease: fence, Through: 3, Offset: 64, Step: 9, Cuts: []int64{5, 30}, CutsTold: true},
	} {
		m, err := wire.EventOf(ev)
		if err != nil {
			f.Fatal(err)
		}
		add(byte(11*i), m) // 0 mod 11: an Event
	}
	add(1, wire.JoinOf(cluster.Join{Node: "n", Incarnation: 4, Ranks: []string{"n/0", "n/1"}}))
	add(2, wire.LeaveOf(cluster.Leave{Node: "n", Incarnation: 4}))
	add(3, wire.FailOf(cluster.Fail{Node: "n", Incarnation: 4}))
	add(4, wire.LeaseOf(cluster.Lease{Rank: "n/0", Session: fence, Fence: fence, Epoch: 1, Index: 1, Start: 10, End: 20}))
	add(5, wire.RevokeOf(cluster.Revoke{Rank: "n/0", Session: fence, Lease: fence, From: 15}))
	add(6, wire.AckOf(cluster.Ack{Rank: "n/0", Epoch: 1, Step: 4}))
	add(7, wire.EvictionOf(cluster.Eviction{Node: "n", Incarnation: 4}))
	add(8, &wire.Welcome{Node: "n", Incarnation: 2})
	add(9, &wire.StreamEnd{})
	add(10, &wire.Fence{Incarnation: 1, Seq: 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		kind, b := data[0]%11, data[1:]
		var m proto.Message
		var conv func() (any, any)
		switch kind {
		case 0:
			e := &wire.Event{}
			m, conv = e, func() (any, any) {
				c := e.Cluster()
				if c == nil {
					return nil, nil
				}
				back, err := wire.EventOf(c)
				if err != nil {
					t.Fatalf("EventOf(%+v) of a decoded event: %v", c, err)
				}
				return c, back.Cluster()
			}
		case 1:
			j := &wire.Join{}
			m, conv = j, func() (any, any) { c := j.Cluster(); return norm(c), norm(wire.JoinOf(c).Cluster()) }
		case 2:
			l := &wire.Leave{}
			m, conv = l, func() (any, any) { c := l.Cluster(); return c, wire.LeaveOf(c).Cluster() }
		case 3:
			x := &wire.Fail{}
			m, conv = x, func() (any, any) { c := x.Cluster(); return c, wire.FailOf(c).Cluster() }
		case 4:
			x := &wire.Lease{}
			m, conv = x, func() (any, any) { c := x.Cluster(); return c, wire.LeaseOf(c).Cluster() }
		case 5:
			x := &wire.Revoke{}
			m, conv = x, func() (any, any) { c := x.Cluster(); return c, wire.RevokeOf(c).Cluster() }
		case 6:
			x := &wire.Ack{}
			m, conv = x, func() (any, any) { c := x.Cluster(); return c, wire.AckOf(c).Cluster() }
		case 7:
			x := &wire.Eviction{}
			m, conv = x, func() (any, any) { c := x.Cluster(); return c, wire.EvictionOf(c).Cluster() }
		case 8:
			x := &wire.Welcome{}
			m, conv = x, func() (any, any) { x.Cluster(); return nil, nil }
		case 9:
			x := &wire.StreamEnd{}
			m, conv = x, func() (any, any) { c := x.Cluster(); return c, wire.StreamEndOf(c).Cluster() }
		case 10:
			x := &wire.Fence{}
			m, conv = x, func() (any, any) { c := x.Cluster(); return c, wire.FenceOf(c).Cluster() }
		}
		if err := proto.Unmarshal(b, m); err != nil {
			return
		}
		once, twice := conv()
		if !reflect.DeepEqual(once, twice) {
			t.Fatalf("%T: converted %+v, then back and again %+v", m, once, twice)
		}
	})
}

// norm makes a Join's empty rank list compare equal to a nil one.
func norm(j cluster.Join) cluster.Join {
	if len(j.Ranks) == 0 {
		j.Ranks = nil
	}
	return j
}
