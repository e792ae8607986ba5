package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/longshore/longshore/cmd/internal/secure"
	"github.com/longshore/longshore/delivery"
)

// endpoints are the addresses for the refusal off loopback
// (secure.Flags.Check).
func (o options) endpoints() (gossipAt, remoteAt []secure.Endpoint) {
	return secure.Endpoints(o.gossip, o.gossipAdvertise, o.listen, o.advertise)
}

// registerFeedPeers adds --feed-allow-uid and --feed-allow-gid, which
// admit other users' trainers to the feed sockets (delivery.PeerPolicy).
func registerFeedPeers(fs *flag.FlagSet, p *delivery.PeerPolicy) {
	fs.Var((*idList)(&p.UIDs), "feed-allow-uid", "with --sink feed: also admit trainers running as these uids (comma-separated); default: this node's uid only, checked with SO_PEERCRED")
	fs.Var((*idList)(&p.GIDs), "feed-allow-gid", "with --sink feed: also admit trainers whose primary group is one of these gids (comma-separated)")
}

// idList is a comma-separated list of uids or gids.
type idList []int

func (l *idList) String() string {
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (l *idList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a uid or gid", f)
		}
		*l = append(*l, n)
	}
	return nil
}
