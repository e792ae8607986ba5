package wire

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestControlGuardRecovers: a panic in the message stream's handler is
// an Internal error and a count, never the process's end; a method
// other than the stream (one the service may gain, too) is refused
// before its handler runs, counted under its name or "other".
func TestControlGuardRecovers(t *testing.T) {
	c := newControlCounters()
	g := &controlGuard{c: c, protocol: "longshore.wire.", self: func() string { return "127.0.0.1:1" }}
	err := g.stream(nil, nil, &grpc.StreamServerInfo{FullMethod: receiveMethod}, func(any, grpc.ServerStream) error {
		panic("implement me")
	})
	if status.Code(err) != codes.Internal {
		t.Errorf("a panicking stream handler: %v, want Internal", err)
	}
	ran := false
	handler := func(any, grpc.ServerStream) error { ran = true; return nil }
	for _, m := range []string{"/remote.Remoting/NewStream", "/other.Service/Receive"} {
		if err := g.stream(nil, nil, &grpc.StreamServerInfo{FullMethod: m}, handler); status.Code(err) != codes.Unimplemented {
			t.Errorf("%s: %v, want Unimplemented", m, err)
		}
	}
	if _, err := g.unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/remote.Remoting/ListProcesses"},
		func(context.Context, any) (any, error) { ran = true; return nil, nil }); status.Code(err) != codes.Unimplemented {
		t.Errorf("ListProcesses: %v, want Unimplemented", err)
	}
	if ran {
		t.Error("a refused method's handler ran")
	}
	if p := c.panics.Load(); p != 1 {
		t.Errorf("%d panics counted, want 1", p)
	}
	if n := c.refused[otherMethod].Load(); n != 2 {
		t.Errorf("%d calls of unknown methods counted, want 2", n)
	}
	if n := c.refused["ListProcesses"].Load(); n != 1 {
		t.Errorf("%d ListProcesses calls counted, want 1", n)
	}
}
