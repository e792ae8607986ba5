package wire

// The control port serves the protocol and nothing else.
//
// protoactor remote registers its whole Remoting gRPC service: besides
// the message stream (Receive) it has ListProcesses and
// GetProcessDiagnostics, whose handlers panic ("implement me"), and grpc
// does not recover a handler's panic: one call ended the process. The
// stream's reader indexes a batch's tables with the indices the peer
// sent (a bad one panicked too), and hands any registered protobuf type
// to any local actor, system messages included: a remote Stop, Watch or
// PoisonPill reached the coordinator's and the nodes' actors.
//
// StartRemote installs a unary and a stream interceptor on the remote's
// gRPC server. They refuse every method but the message stream
// (Unimplemented), recover a handler's panic into an Internal error,
// and read each batch as it arrives, before protoactor does: a batch
// whose indices point outside its tables (or that names an unknown type
// of the protocol) ends its stream
// (InvalidArgument) with nothing delivered, and an envelope of a type
// outside this package's protocol (package longshore.wire, protobuf
// encoding) or addressed to another process (protoactor would pass it
// on, a relay under this host's certificate) is dropped. The longshore processes never send anything
// else: no remote watches (liveness is gossip's), no spawns, no system
// messages. Each refusal is counted (ControlCounts).

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// ControlCounts is what the control port refused or recovered from since
// the process started.
type ControlCounts struct {
	// RefusedCalls counts the calls of methods other than the message
	// stream, by method name (those of protoactor's Remoting service).
	RefusedCalls map[string]uint64
	// RefusedMessages counts the envelopes dropped as outside the
	// protocol: system messages (Stop, Watch, Unwatch, Terminated),
	// PoisonPill, any other type, a type of ours in another encoding, and
	// an envelope addressed to another process.
	RefusedMessages uint64
	// MalformedBatches counts the batches whose indices point outside
	// their tables, or that name a protocol type this build does not
	// know: their stream was ended with nothing delivered.
	MalformedBatches uint64
	// Panics counts the handler panics recovered into an error.
	Panics uint64
}

// receiveMethod is the full name of protoactor's message stream.
var receiveMethod = "/" + remote.Remoting_ServiceDesc.ServiceName + "/Receive"

// ctl is the process's control-port counters (one remote per process).
var ctl = newControlCounters()

type controlCounters struct {
	refused   map[string]*atomic.Uint64 // by method; the keys never change
	messages  atomic.Uint64
	malformed atomic.Uint64
	panics    atomic.Uint64
}

// otherMethod is the count key of a method the Remoting service does not
// have (grpc answers those itself, before any interceptor).
const otherMethod = "other"

func newControlCounters() *controlCounters {
	c := &controlCounters{refused: map[string]*atomic.Uint64{otherMethod: {}}}
	d := remote.Remoting_ServiceDesc
	for _, m := range d.Methods {
		c.refused[m.MethodName] = &atomic.Uint64{}
	}
	for _, s := range d.Streams {
		c.refused[s.StreamName] = &atomic.Uint64{}
	}
	return c
}

// ControlPortCounts returns the process's control-port counters.
func ControlPortCounts() ControlCounts {
	out := ControlCounts{RefusedCalls: map[string]uint64{},
		RefusedMessages: ctl.messages.Load(), MalformedBatches: ctl.malformed.Load(), Panics: ctl.panics.Load()}
	for m, n := range ctl.refused {
		out.RefusedCalls[m] = n.Load()
	}
	return out
}

func (c *controlCounters) refuse(fullMethod string) error {
	name := fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
	n, ok := c.refused[name]
	if !ok || !strings.HasPrefix(fullMethod, "/"+remote.Remoting_ServiceDesc.ServiceName+"/") {
		n = c.refused[otherMethod]
	}
	n.Add(1)
	return status.Errorf(codes.Unimplemented, "wire: the control port serves only the message stream %s, not %s", receiveMethod, fullMethod)
}

// recovered turns a handler's panic p into an error, counted and logged.
func (c *controlCounters) recovered(fullMethod string, p any) error {
	c.panics.Add(1)
	slog.Error("control port: a handler panicked; recovered", "method", fullMethod, "panic", fmt.Sprint(p))
	return status.Errorf(codes.Internal, "wire: the control port's handler of %s failed", fullMethod)
}

// controlGuard is the interceptors of one remote's gRPC server.
type controlGuard struct {
	c *controlCounters
	// protocol prefixes the type name of every message the protocol
	// carries: its protobuf package and a dot.
	protocol string
	// self is this process's address, as its PIDs carry it; read once
	// the remote has started (the server serves only after that).
	self func() string
}

// controlServerOptions are the gRPC server options that make the
// server of sys's remote serve only the protocol.
func controlServerOptions(sys *actor.ActorSystem) []grpc.ServerOption {
	g := &controlGuard{c: ctl, protocol: string(File_wire_proto.Package()) + ".", self: sys.Address}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(g.unary),
		grpc.ChainStreamInterceptor(g.stream),
	}
}

func (g *controlGuard) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	// No unary method is the protocol's: refused before the handler.
	return nil, g.c.refuse(info.FullMethod)
}

func (g *controlGuard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	if info.FullMethod != receiveMethod {
		return g.c.refuse(info.FullMethod)
	}
	defer func() {
		if p := recover(); p != nil {
			err = g.c.recovered(info.FullMethod, p)
		}
	}()
	return handler(srv, &guardedStream{ServerStream: ss, g: g})
}

// guardedStream checks each batch the message stream receives before
// protoactor's reader sees it.
type guardedStream struct {
	grpc.ServerStream
	g *controlGuard
}

func (s *guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	rm, ok := m.(*remote.RemoteMessage)
	if !ok {
		return status.Errorf(codes.Internal, "wire: the message stream received a %T", m)
	}
	b := rm.GetMessageBatch()
	if b == nil {
		return nil // connect and disconnect requests
	}
	c := s.g.c
	if err := checkBatch(b); err != nil {
		c.malformed.Add(1)
		return status.Errorf(codes.InvalidArgument, "wire: refused a message batch: %v", err)
	}
	self := s.g.self()
	kept := b.Envelopes[:0]
	for i, e := range b.Envelopes {
		name := b.TypeNames[e.TypeId]
		if e.SerializerId != 0 || !strings.HasPrefix(name, s.g.protocol) || b.Targets[e.Target].Address != self {
			c.messages.Add(1)
			continue
		}
		// protoactor's deserializer dereferences the type it looks up.
		if _, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name)); err != nil {
			c.malformed.Add(1)
			return status.Errorf(codes.InvalidArgument, "wire: refused a message batch: envelope %d: type %q: %v", i, name, err)
		}
		kept = append(kept, e)
	}
	clear(b.Envelopes[len(kept):])
	b.Envelopes = kept
	return nil
}

// checkBatch reports an envelope whose indices point outside the batch's
// tables, or at no PID: protoactor's reader would index out of range or
// dereference nil.
func checkBatch(b *remote.MessageBatch) error {
	for i, e := range b.Envelopes {
		switch {
		case e == nil:
			return fmt.Errorf("envelope %d is empty", i)
		case e.TypeId < 0 || int(e.TypeId) >= len(b.TypeNames):
			return fmt.Errorf("envelope %d: type %d of %d", i, e.TypeId, len(b.TypeNames))
		case e.Target < 0 || int(e.Target) >= len(b.Targets) || b.Targets[e.Target] == nil:
			return fmt.Errorf("envelope %d: target %d of %d", i, e.Target, len(b.Targets))
		case e.Sender < 0 || int(e.Sender) > len(b.Senders) || e.Sender > 0 && b.Senders[e.Sender-1] == nil:
			return fmt.Errorf("envelope %d: sender %d of %d", i, e.Sender, len(b.Senders))
		}
	}
	return nil
}
