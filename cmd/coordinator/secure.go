package main

import (
	"log/slog"

	"github.com/asynkron/protoactor-go/remote"

	"github.com/longshore/longshore/cmd/internal/secure"
)

// endpoints are the coordinator's addresses for the refusal off loopback
// (secure.Flags.Check).
func (o options) endpoints() (gossipAt, remoteAt []secure.Endpoint) {
	return []secure.Endpoint{{Flag: "--gossip", Addr: o.gossip}, {Flag: "--gossip-advertise", Addr: o.gossipAdvertise}},
		[]secure.Endpoint{{Flag: "--listen", Addr: o.listen}, {Flag: "--advertise", Addr: o.advertise}}
}

// security loads what the security flags name: the gossip keys and the
// remote's TLS options (nil when not given), and logs what protects each
// channel.
func security(o options, logger *slog.Logger) ([][]byte, []remote.ConfigOption, error) {
	keys, err := o.sec.GossipKeys()
	if err != nil {
		return nil, nil, err
	}
	ropts, err := o.sec.RemoteOptions()
	if err != nil {
		return nil, nil, err
	}
	o.sec.Describe(logger, keys)
	return keys, ropts, nil
}
