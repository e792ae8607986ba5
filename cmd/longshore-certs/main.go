// Command longshore-certs makes what a secured cluster needs
// (docs/security.md), with Go's crypto/x509 only:
//
//	longshore-certs ca --out DIR [--name NAME] [--days N]
//	    a private CA: DIR/ca.crt (give it to every host) and DIR/ca.key
//	    (0600; keep it off the hosts)
//	longshore-certs host --ca DIR --name NAME [--ip IP]... [--dns NAME]... --out DIR [--days N]
//	    a host certificate signed by the CA, for both ends of the control
//	    plane: DIR/tls.crt, DIR/tls.key (0600) and DIR/ca.crt, which are
//	    --tls-cert, --tls-key and --tls-ca of longshore-node and
//	    longshore-coordinator. Name every address others dial the host at.
//	longshore-certs gossip-key --out FILE
//	    a random 32-byte gossip key, base64, in FILE (0600): --gossip-key-file
//	longshore-certs cluster --ca DIR --out DIR --hosts NAME[,NAME...]
//	    all of it for a small deployment, keeping what exists (so a setup job
//	    may run it again): the CA in --ca (created if missing), OUT/NAME/ for
//	    each host (a certificate naming NAME as its DNS name) and OUT/gossip.key
//
// Keys are ECDSA P-256. Existing files are never replaced.
package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/longshore/longshore/cluster/certs"
	"github.com/longshore/longshore/cmd/internal/version"
)

func main() {
	version.Exit("longshore-certs")
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage:
  longshore-certs ca --out DIR [--name NAME] [--days N]
  longshore-certs host --ca DIR --name NAME [--ip IP]... [--dns NAME]... --out DIR [--days N]
  longshore-certs gossip-key --out FILE
  longshore-certs cluster --ca DIR --out DIR --hosts NAME[,NAME...]
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "ca":
		err = makeCA(args[1:], stdout, stderr)
	case "host":
		err = makeHost(args[1:], stdout, stderr)
	case "gossip-key":
		err = makeGossipKey(args[1:], stdout, stderr)
	case "cluster":
		err = makeCluster(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		err = fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "longshore-certs: %v\n", err)
		return 1
	}
	return 0
}

// list is a repeatable flag; a value may also hold a comma-separated list.
type list []string

func (l *list) String() string { return strings.Join(*l, ",") }
func (l *list) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func days(n int) time.Duration { return time.Duration(n) * 24 * time.Hour }

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return nil
}

func makeCA(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("longshore-certs ca", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "directory for ca.crt and ca.key (created 0700)")
	name := fs.String("name", "longshore CA", "the CA's name (subject CN)")
	nd := fs.Int("days", int(certs.DefaultCAValidity/(24*time.Hour)), "validity in days")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("ca: --out DIR is required")
	}
	ca, err := certs.NewCA(*name, days(*nd))
	if err != nil {
		return err
	}
	if err := ca.WriteCA(*out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "CA %q valid until %s: %s/%s (public), %s/%s (private, 0600: keep it off the hosts)\n",
		*name, ca.Cert.NotAfter.Format(time.DateOnly), *out, certs.CACert, *out, certs.CAKey)
	return nil
}

func makeHost(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("longshore-certs host", flag.ContinueOnError)
	fs.SetOutput(stderr)
	caDir := fs.String("ca", "", "directory of the CA (ca.crt, ca.key) made by `longshore-certs ca`")
	name := fs.String("name", "", "the host's name (subject CN, and a DNS SAN if it is a DNS name)")
	out := fs.String("out", "", "directory for tls.crt, tls.key and ca.crt (created 0700)")
	var ips, dns list
	fs.Var(&ips, "ip", "an IP address others dial this host at (repeat or comma-separate)")
	fs.Var(&dns, "dns", "a DNS name others dial this host at (repeat or comma-separate)")
	nd := fs.Int("days", int(certs.DefaultHostValidity/(24*time.Hour)), "validity in days (at most the CA's)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var errs []error
	if *caDir == "" {
		errs = append(errs, errors.New("host: --ca DIR is required"))
	}
	if *name == "" {
		errs = append(errs, errors.New("host: --name NAME is required"))
	}
	if *out == "" {
		errs = append(errs, errors.New("host: --out DIR is required"))
	}
	h := certs.Host{Name: *name, DNS: dns, Validity: days(*nd)}
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			errs = append(errs, fmt.Errorf("host: --ip %q is not an IP address", s))
			continue
		}
		h.IPs = append(h.IPs, ip)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	ca, err := certs.LoadCA(*caDir)
	if err != nil {
		return err
	}
	crt, key, err := ca.Issue(h)
	if err != nil {
		return err
	}
	if err := certs.WriteHost(*out, crt, key, ca.CertPEM); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "host %q (ip %s, dns %s): --tls-cert %s/%s --tls-key %s/%s --tls-ca %s/%s\n",
		*name, ips.String(), dns.String(), *out, certs.HostCert, *out, certs.HostKey, *out, certs.CACert)
	return nil
}

func makeGossipKey(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("longshore-certs gossip-key", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "file for the key (0600); give the same file to every member")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("gossip-key: --out FILE is required")
	}
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return err
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("gossip-key: %s exists; to rotate, see docs/security.md", *out)
		}
		return err
	}
	if _, err := fmt.Fprintln(f, base64.StdEncoding.EncodeToString(k)); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "gossip key (AES-256) in %s (0600): --gossip-key-file %s\n", *out, *out)
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// makeCluster makes what is missing of a small deployment: the CA, a
// certificate per host (named by its DNS name, as containers reach each
// other by service name) and the gossip key.
func makeCluster(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("longshore-certs cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	caDir := fs.String("ca", "", "directory of the CA; made if it holds none (keep it where only this job can read it)")
	out := fs.String("out", "", "directory for OUT/<host>/{tls.crt,tls.key,ca.crt} and OUT/gossip.key")
	var hosts list
	fs.Var(&hosts, "hosts", "host names (comma-separated or repeated); each certificate names its host as a DNS name")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *caDir == "" || *out == "" || len(hosts) == 0 {
		return errors.New("cluster: --ca DIR, --out DIR and --hosts are required")
	}
	if !exists(filepath.Join(*caDir, certs.CACert)) {
		if err := makeCA([]string{"--out", *caDir}, stdout, stderr); err != nil {
			return err
		}
	}
	for _, h := range hosts {
		dir := filepath.Join(*out, h)
		if exists(filepath.Join(dir, certs.HostCert)) {
			fmt.Fprintf(stdout, "host %q: %s exists, kept\n", h, dir)
			continue
		}
		if err := makeHost([]string{"--ca", *caDir, "--name", h, "--dns", h, "--out", dir}, stdout, stderr); err != nil {
			return err
		}
	}
	if key := filepath.Join(*out, "gossip.key"); !exists(key) {
		return makeGossipKey([]string{"--out", key}, stdout, stderr)
	}
	fmt.Fprintf(stdout, "gossip key: %s exists, kept\n", filepath.Join(*out, "gossip.key"))
	return nil
}
