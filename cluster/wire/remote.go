package wire

import (
	"fmt"
	"net"
	"strconv"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
)

// StartRemote starts protoactor remote on sys, listening on listen
// (host:port; port 0 picks one) and advertising advertise (empty: the
// address it listens on, which must then be reachable by the others). It
// returns the remote and the address others reach this process at. opts
// configure the remote further (TLS.RemoteOptions: mutual TLS).
//
// The control port serves only the protocol (see ctlport.go): other
// methods of protoactor's service are refused, handler panics recovered,
// and messages outside the protocol dropped, whatever opts say.
//
// remote.Start panics when it cannot listen; the port is probed first so
// a taken port is an error instead.
func StartRemote(sys *actor.ActorSystem, listen, advertise string, opts ...remote.ConfigOption) (*remote.Remote, string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, "", fmt.Errorf("wire: listen address %q: %w", listen, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, "", fmt.Errorf("wire: listen port %q: %w", port, err)
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, "", fmt.Errorf("wire: listen on %s: %w", listen, err)
	}
	if p == 0 {
		p = l.Addr().(*net.TCPAddr).Port
	}
	l.Close()
	opts = append([]remote.ConfigOption(nil), opts...)
	if advertise != "" {
		opts = append(opts, remote.WithAdvertisedHost(advertise))
	}
	cfg := remote.Configure(host, p, opts...)
	// WithServerOptions replaces the options before it (TLS sets some):
	// the control port's guard goes after whatever they are.
	cfg.ServerOptions = append(append([]grpc.ServerOption(nil), cfg.ServerOptions...), controlServerOptions(sys)...)
	r := remote.NewRemote(sys, cfg)
	r.Start()
	return r, sys.Address(), nil
}
