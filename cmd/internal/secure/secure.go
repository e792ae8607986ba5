// Package secure holds the security flags longshore-node and
// longshore-coordinator share, and the policy behind them
// (docs/security.md): gossip is encrypted with a shared key
// (--gossip-key-file), the control plane runs over mutual TLS
// (--tls-cert, --tls-key, --tls-ca, --tls-peer-name), and a process that
// would listen on or advertise an address off loopback without them
// refuses to start unless --insecure says so. Loopback needs nothing: on
// one machine only its own users can reach those ports.
//
// Nothing here prints a key: the gossip key file is named by path and
// its keys by gossip.KeyID, TLS by the certificate's subject.
package secure

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/asynkron/protoactor-go/remote"

	"github.com/longshore/longshore/cluster/gossip"
	"github.com/longshore/longshore/cluster/wire"
	"github.com/longshore/longshore/observe"
)

// Flags are the security flags. The zero value is plaintext everywhere,
// which Check allows on loopback only.
type Flags struct {
	// GossipKeyFile holds one base64 gossip key per line, the first the
	// primary (gossip.ParseKeys). SIGHUP reloads it (Reloader).
	GossipKeyFile string
	// TLS is the control plane's mutual TLS; all of Cert, Key, CA or none.
	TLS wire.TLSFiles
	// Insecure lets a process listen off loopback without a gossip key or
	// without TLS (a closed network, a test): plaintext, and warned about.
	Insecure bool
}

// Register adds the flags to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.GossipKeyFile, "gossip-key-file", "", "encrypt gossip with the base64 AES key(s) in this file, one per line, the first used to encrypt (make one: longshore-certs gossip-key); SIGHUP reloads it to rotate keys (docs/security.md). Required off loopback unless --insecure")
	fs.StringVar(&f.TLS.Cert, "tls-cert", "", "this host's certificate (PEM) for mutual TLS on the control plane (make one: longshore-certs host). Required off loopback unless --insecure")
	fs.StringVar(&f.TLS.Key, "tls-key", "", "the private key (PEM) of --tls-cert")
	fs.StringVar(&f.TLS.CA, "tls-ca", "", "the CA certificate (PEM) that signs every member's certificate; peers it did not sign are refused")
	fs.StringVar(&f.TLS.PeerName, "tls-peer-name", "", "with --tls-cert: accept only peers whose certificate has a DNS name or CN matching this pattern (*, ?, [...]), e.g. 'node-*'")
	fs.BoolVar(&f.Insecure, "insecure", false, "allow gossip without --gossip-key-file and the control plane without --tls-cert on addresses off loopback: anyone who can reach them can join, read and steer the job")
}

// Endpoint is one address a process listens on or advertises, with the
// flag that set it (for the refusal's message).
type Endpoint struct {
	Flag string // "--gossip"
	Addr string // host:port; "" is skipped
}

// ErrInsecure is wrapped by Check's refusals.
var ErrInsecure = errors.New("refusing to run without encryption off loopback")

// Check reports every problem with the flags at once: TLS files given in
// part, a bad peer-name pattern, and gossip or control-plane endpoints
// off loopback without their key (unless Insecure). An address is on
// loopback when its host is a loopback IP (127.0.0.0/8, ::1) or
// "localhost"; any other name, and an empty host (every interface), is
// not: a name may resolve anywhere.
func (f *Flags) Check(gossipAt, remoteAt []Endpoint) error {
	var errs []error
	if f.TLS != (wire.TLSFiles{}) {
		if err := f.TLS.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if f.Insecure {
		return errors.Join(errs...)
	}
	if f.GossipKeyFile == "" {
		if ep, ok := offLoopback(gossipAt); ok {
			errs = append(errs, fmt.Errorf("%w: %s %s is not a loopback address, and gossip without --gossip-key-file is readable and joinable by anyone who can reach it: give every member the same key file (longshore-certs gossip-key --out FILE), or --insecure (docs/security.md)", ErrInsecure, ep.Flag, ep.Addr))
		}
	}
	if f.TLS.Cert == "" {
		if ep, ok := offLoopback(remoteAt); ok {
			errs = append(errs, fmt.Errorf("%w: %s %s is not a loopback address, and control messages without --tls-cert, --tls-key and --tls-ca can be read and forged by anyone who can reach it: give each host a certificate of the cluster's CA (longshore-certs ca, longshore-certs host), or --insecure (docs/security.md)", ErrInsecure, ep.Flag, ep.Addr))
		}
	}
	return errors.Join(errs...)
}

func offLoopback(eps []Endpoint) (Endpoint, bool) {
	for _, ep := range eps {
		if ep.Addr != "" && !Loopback(ep.Addr) {
			return ep, true
		}
	}
	return Endpoint{}, false
}

// Loopback reports whether host:port (or a bare host) names a loopback
// address, without asking DNS: the metrics servers' rule
// (observe.Loopback), one rule for every listener.
func Loopback(addr string) bool { return observe.Loopback(addr) }

// GossipKeys reads the key file; nil, nil without one.
func (f *Flags) GossipKeys() ([][]byte, error) {
	if f.GossipKeyFile == "" {
		return nil, nil
	}
	keys, err := gossip.ReadKeyFile(f.GossipKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--gossip-key-file: %w", err)
	}
	return keys, nil
}

// RemoteOptions loads the TLS files into protoactor remote options; nil,
// nil without TLS.
func (f *Flags) RemoteOptions() ([]remote.ConfigOption, error) {
	if f.TLS.Cert == "" {
		return nil, nil
	}
	t, err := wire.LoadTLS(f.TLS)
	if err != nil {
		return nil, err
	}
	return t.RemoteOptions(), nil
}

// Endpoints lists a daemon's addresses for Check: its gossip bind and
// advertised addresses, and its remote's.
func Endpoints(gossip, gossipAdvertise, listen, advertise string) (gossipAt, remoteAt []Endpoint) {
	return []Endpoint{{Flag: "--gossip", Addr: gossip}, {Flag: "--gossip-advertise", Addr: gossipAdvertise}},
		[]Endpoint{{Flag: "--listen", Addr: listen}, {Flag: "--advertise", Addr: advertise}}
}

// Load loads what the flags name: the gossip keys and the remote's TLS
// options (nil when not given), and logs what protects each channel.
func (f *Flags) Load(logger *slog.Logger) ([][]byte, []remote.ConfigOption, error) {
	keys, err := f.GossipKeys()
	if err != nil {
		return nil, nil, err
	}
	ropts, err := f.RemoteOptions()
	if err != nil {
		return nil, nil, err
	}
	f.Describe(logger, keys)
	return keys, ropts, nil
}

// Describe logs, once at start, what protects each channel (never a key).
func (f *Flags) Describe(logger *slog.Logger, keys [][]byte) {
	if len(keys) > 0 {
		ids := make([]string, len(keys))
		for i, k := range keys {
			ids[i] = gossip.KeyID(k)
		}
		logger.Info("gossip encrypted", "key_file", f.GossipKeyFile, "key_ids", ids)
	} else if f.Insecure {
		logger.Warn("gossip in plaintext (--insecure): anyone who can reach the gossip address can read and join the cluster")
	}
	if f.TLS.Cert != "" {
		logger.Info("control plane over mutual TLS", "cert", f.TLS.Cert, "ca", f.TLS.CA, "peer_name", f.TLS.PeerName)
	} else if f.Insecure {
		logger.Warn("control plane in plaintext (--insecure): anyone who can reach the control address can forge commits and leases")
	}
}

// Reloader rotates the gossip keys when the process gets SIGHUP: it
// reads the key file again and makes it the keyring (gossip.SetKeys:
// install every key, encrypt with the first, forget the rest). A file
// that does not parse leaves the keys as they were, and says so.
type Reloader struct {
	path string
	sig  chan os.Signal
	log  *slog.Logger
}

// CatchReload starts catching SIGHUP, so that one arriving before the
// gossip starts does not kill the process (its default action); nil
// without a key file (SIGHUP keeps its default).
func (f *Flags) CatchReload(logger *slog.Logger) *Reloader {
	if f.GossipKeyFile == "" {
		return nil
	}
	r := &Reloader{path: f.GossipKeyFile, sig: make(chan os.Signal, 1), log: logger}
	signal.Notify(r.sig, syscall.SIGHUP)
	return r
}

// Serve reloads m's keys on each SIGHUP until ctx is done, then stops
// catching the signal. Safe on a nil Reloader (it waits for ctx).
func (r *Reloader) Serve(ctx context.Context, m *gossip.Membership) {
	if r == nil {
		<-ctx.Done()
		return
	}
	defer signal.Stop(r.sig)
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.sig:
			r.Reload(m)
		}
	}
}

// Go serves in a goroutine (Serve) until stop, which waits for it to
// end. Safe on a nil Reloader.
func (r *Reloader) Go(m *gossip.Membership) (stop func()) {
	if r == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Serve(ctx, m) }()
	return func() { cancel(); <-done }
}

// Reload does one reload now; it returns what it logged as an error.
func (r *Reloader) Reload(m *gossip.Membership) error {
	keys, err := gossip.ReadKeyFile(r.path)
	if err == nil {
		err = m.SetKeys(keys)
	}
	if err != nil {
		r.log.Error("gossip key reload failed; keeping the keys in use", "key_file", r.path, "err", err, "key_ids", m.KeyIDs())
		return err
	}
	r.log.Info("gossip keys reloaded", "key_file", r.path, "key_ids", m.KeyIDs())
	return nil
}
