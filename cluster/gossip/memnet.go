package gossip

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Network is an in-memory network for memberlist, the twin of the real
// UDP and TCP sockets: members started with the same Network (Config.Network)
// reach each other through channels in this process. Tests use it so
// that membership does not depend on a loopback interface a loaded
// machine drops packets on, or on free ports.
//
// It follows memberlist's MockNetwork (mock_transport.go), with three
// differences that a failure test needs: members may come and go while
// others run (MockNetwork's maps are unguarded); a member that shut down
// is gone, so packets to it are dropped, as UDP drops them, and dials to
// it fail, where MockNetwork's unbuffered channels would block the sender
// forever and stall its failure detector; and packets are queued, not
// handed over, so two members answering each other's pings cannot
// deadlock.
//
// The zero Network is ready to use. It is safe for concurrent use.
type Network struct {
	// Inbox is how many packets a member's inbox holds before it drops
	// more, as a full socket buffer would; 0 means 4096 (memQueue). A
	// kernel's default UDP receive buffer (212,992 bytes) holds about
	// 150 full-size gossip packets: BenchmarkScale sets that, so that a
	// thousand members falling behind on two cores drop packets as
	// sockets would, instead of queueing gigabytes.
	Inbox int
	// sent counts what members sent: packets (gossip, probes) and the
	// bytes of packets and of stream writes (push-pull state syncs).
	sent struct{ packets, bytes atomic.Uint64 }
	mu   struct {
		sync.Mutex
		byAddr   map[string]*memTransport
		lastPort int
	}
}

// ErrAddrInUse is returned by Start when Config.BindAddr names an address
// of Config.Network that a running member holds.
var ErrAddrInUse = errors.New("gossip: address in use on the in-memory network")

// memQueue is how many packets a member's inbox holds before it drops
// more, as a full socket buffer would: far more than memberlist sends
// between two reads of its packet listener.
const memQueue = 4096

// listen makes the transport for host:port (port 0: a fresh one).
func (n *Network) listen(host string, port int) (*memTransport, error) {
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("gossip: in-memory network: BindAddr host %q is not an IP address", host)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.byAddr == nil {
		n.mu.byAddr = map[string]*memTransport{}
	}
	if port == 0 {
		for {
			n.mu.lastPort++
			if _, taken := n.mu.byAddr[net.JoinHostPort(host, strconv.Itoa(n.mu.lastPort))]; !taken {
				break
			}
		}
		port = n.mu.lastPort
	}
	addr := net.JoinHostPort(ip.String(), strconv.Itoa(port))
	if _, taken := n.mu.byAddr[addr]; taken {
		return nil, fmt.Errorf("%w: %s", ErrAddrInUse, addr)
	}
	t := &memTransport{
		net:     n,
		addr:    &net.UDPAddr{IP: ip, Port: port},
		key:     addr,
		packets: make(chan *memberlist.Packet, cmp.Or(n.Inbox, memQueue)),
		streams: make(chan net.Conn, 64),
		done:    make(chan struct{}),
	}
	n.mu.byAddr[addr] = t
	return t, nil
}

// Sent returns how many packets members sent, and the bytes of those
// packets and of their stream writes, since the network was made.
func (n *Network) Sent() (packets, bytes uint64) {
	return n.sent.packets.Load(), n.sent.bytes.Load()
}

// countConn counts what is written to a stream in the network's bytes.
type countConn struct {
	net.Conn
	n *Network
}

func (c countConn) Write(b []byte) (int, error) {
	k, err := c.Conn.Write(b)
	c.n.sent.bytes.Add(uint64(k))
	return k, err
}

// peer returns the live member at addr, or nil.
func (n *Network) peer(addr string) *memTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.byAddr[addr]
}

// memTransport is one member's end of a Network.
type memTransport struct {
	net     *Network
	addr    *net.UDPAddr // what memberlist sees as this member's address
	key     string       // addr as host:port
	packets chan *memberlist.Packet
	streams chan net.Conn
	done    chan struct{} // closed by Shutdown
	once    sync.Once
}

var _ memberlist.NodeAwareTransport = (*memTransport)(nil)

// FinalAdvertiseAddr returns the member's address on the network,
// whatever was configured.
func (t *memTransport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return t.addr.IP, t.addr.Port, nil
}

func (t *memTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress queues a copy of b for the member at a.Addr. A packet
// to nobody, or to a member whose inbox is full, is dropped: memberlist
// is built for UDP.
func (t *memTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	select {
	case <-t.done:
		return now, errors.New("gossip: in-memory transport is shut down")
	default:
	}
	dest := t.net.peer(a.Addr)
	if dest == nil {
		return now, nil
	}
	t.net.sent.packets.Add(1)
	t.net.sent.bytes.Add(uint64(len(b)))
	p := &memberlist.Packet{Buf: append([]byte(nil), b...), From: t.addr, Timestamp: now}
	select {
	case dest.packets <- p:
	default:
	}
	return now, nil
}

func (t *memTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *memTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout connects to the member at a.Addr with a pipe; it
// fails at once if nobody is there.
func (t *memTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	dest := t.net.peer(a.Addr)
	if dest == nil {
		return nil, fmt.Errorf("dial mem %s: connection refused", a.Addr)
	}
	l, r := net.Pipe()
	local, remote := countConn{l, t.net}, countConn{r, t.net}
	wait := time.NewTimer(timeout)
	defer wait.Stop()
	select {
	case dest.streams <- remote:
		return local, nil
	case <-dest.done:
	case <-t.done:
	case <-wait.C:
	}
	local.Close()
	remote.Close()
	return nil, fmt.Errorf("dial mem %s: connection refused", a.Addr)
}

func (t *memTransport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown takes the member off the network: its address is free again,
// and connections queued for it are closed so their dialers see EOF.
func (t *memTransport) Shutdown() error {
	t.once.Do(func() {
		t.net.mu.Lock()
		if t.net.mu.byAddr[t.key] == t {
			delete(t.net.mu.byAddr, t.key)
		}
		t.net.mu.Unlock()
		close(t.done)
		for {
			select {
			case c := <-t.streams:
				c.Close()
			default:
				return
			}
		}
	})
	return nil
}
