package main

import (
	"github.com/longshore/longshore/cmd/internal/secure"
)

// endpoints are the addresses for the refusal off loopback
// (secure.Flags.Check).
func (o options) endpoints() (gossipAt, remoteAt []secure.Endpoint) {
	return secure.Endpoints(o.gossip, o.gossipAdvertise, o.listen, o.advertise)
}
