package integration

import (
	"bufio"
	"context"
	"fmt"
	"image"
	"image/jpeg"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/longshore/longshore/internal/testports"
)

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// binaries builds longshore-coordinator and longshore-node once per test
// binary, into a temporary directory removed by TestMain.
func binaries(t testing.TB) (coord, node string) {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "longshore-integ-bin-")
		if binErr != nil {
			return
		}
		for _, b := range []struct{ out, pkg string }{
			{"longshore-coordinator", "../cmd/coordinator"},
			{"longshore-node", "../cmd/node"},
		} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, b.out), b.pkg)
			if out, err := cmd.CombinedOutput(); err != nil {
				binErr = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
				return
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return filepath.Join(binDir, "longshore-coordinator"), filepath.Join(binDir, "longshore-node")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// makeDataset writes n tiny JPEGs in ImageFolder layout (3 classes) and
// returns the directory and the keys.
func makeDataset(t testing.TB, n int) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	var keys []string
	for i := range n {
		class := fmt.Sprintf("c%d", i%3)
		if err := os.MkdirAll(filepath.Join(dir, class), 0o755); err != nil {
			t.Fatal(err)
		}
		img := image.NewRGBA(image.Rect(0, 0, 16, 16))
		for p := range img.Pix {
			img.Pix[p] = uint8(i*7 + p)
		}
		key := fmt.Sprintf("%s/img%04d.jpg", class, i)
		f, err := os.Create(filepath.Join(dir, key))
		if err != nil {
			t.Fatal(err)
		}
		if err := jpeg.Encode(f, img, nil); err != nil {
			t.Fatal(err)
		}
		f.Close()
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return dir, keys
}

// proc is one running process of the cluster.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stderr string
	done   chan struct{}
	err    error
}

func startProc(t *testing.T, dir, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, stderr: filepath.Join(dir, name+".err"), done: make(chan struct{})}
	f, err := os.Create(p.stderr)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Stdout = f
	p.cmd.Stderr = f
	// Text logs, which the tests read (off a terminal the default is JSON).
	p.cmd.Env = append(append(os.Environ(), "LONGSHORE_LOG_FORMAT=text"), env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *proc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		t.Errorf("%s did not exit within %v; stderr:\n%s", p.name, d, tail(p.stderr, 30))
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("timeout")
	}
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// job describes one run.
type job struct {
	dataset    string
	env        []string
	epochs     int
	batch      int
	shard      int
	balance    string
	stepTime   time.Duration
	commit     int
	minRanks   int
	stealMin   int
	extraCoord []string
}

type cluster struct {
	t         *testing.T
	dir       string
	nodeBin   string
	job       job
	coord     *proc
	join      string
	nodes     []*proc
	nodeLogs  []string
	coordBin  string
	coordArgs []string
	nodeArgs  [][]string // node i's flags, to start it again the same way
	coords    []*proc    // every coordinator life, the current one last
}

func startCluster(t *testing.T, j job) *cluster {
	coordBin, nodeBin := binaries(t)
	c := &cluster{t: t, dir: t.TempDir(), nodeBin: nodeBin, job: j}
	c.join = testports.Addr(t, "127.0.0.1")
	args := []string{
		"--dataset", j.dataset, "--listen", testports.Addr(t, "127.0.0.1"), "--gossip", c.join,
		"--gossip-profile", "local", "--epochs", strconv.Itoa(j.epochs), "--seed", "11",
		"--batch-size", strconv.Itoa(j.batch), "--shard-size", strconv.Itoa(j.shard),
		"--balance", j.balance, "--commit-log", "coord.acks", "--linger", "20s",
		"--min-ranks", strconv.Itoa(max(1, j.minRanks)),
	}
	if j.stealMin > 0 {
		args = append(args, "--steal-min", strconv.Itoa(j.stealMin))
	}
	args = append(args, j.extraCoord...)
	c.coordBin, c.coordArgs = coordBin, args
	t.Cleanup(func() { // before t.TempDir's: the logs are still there
		// LONGSHORE_INTEG_LOGS=1: dump the logs of a failed test; =all:
		// of every test.
		if v := os.Getenv("LONGSHORE_INTEG_LOGS"); v == "" || v != "all" && !t.Failed() {
			return
		}
		ents, _ := os.ReadDir(c.dir)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".err") {
				t.Logf("--- %s:\n%s", e.Name(), tail(filepath.Join(c.dir, e.Name()), 60))
			}
		}
	})
	c.coord = startProc(t, c.dir, "coordinator", coordBin, j.env, args...)
	c.coords = []*proc{c.coord}
	return c
}

// restartCoordinator starts another coordinator life with the same flags
// (so the same --checkpoint, --commit-log, addresses) plus extra; flags
// given again in extra win. Its stderr is coordinator-<life>.err.
func (c *cluster) restartCoordinator(extra ...string) *proc {
	c.t.Helper()
	name := fmt.Sprintf("coordinator-%d", len(c.coords)+1)
	c.coord = startProc(c.t, c.dir, name, c.coordBin, c.job.env, append(append([]string(nil), c.coordArgs...), extra...)...)
	c.coords = append(c.coords, c.coord)
	return c.coord
}

// restartNode starts node i again with the flags it first had; it appends
// to the same delivery log.
func (c *cluster) restartNode(i int) *proc {
	c.t.Helper()
	name := fmt.Sprintf("n%d", i+1)
	for k := 2; ; k++ {
		if _, err := os.Stat(filepath.Join(c.dir, fmt.Sprintf("n%d-%d.err", i+1, k))); os.IsNotExist(err) {
			name = fmt.Sprintf("n%d-%d", i+1, k)
			break
		}
	}
	p := startProc(c.t, c.dir, name, c.nodeBin, c.job.env, c.nodeArgs[i]...)
	c.nodes[i] = p
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// addNode starts node i on 127.0.0.(i+2) with two ranks.
func (c *cluster) addNode(extra ...string) *proc {
	i := len(c.nodes) + 1
	host := fmt.Sprintf("127.0.0.%d", i+1)
	name := fmt.Sprintf("n%d", i)
	log := name + ".log"
	args := []string{
		"--id", name, "--join", c.join, "--gossip", testports.Addr(c.t, host), "--listen", testports.Addr(c.t, host),
		"--gossip-profile", "local", "--ranks", "2", "--dataset", c.job.dataset, "--sink", "log:" + log,
		"--commit-every", strconv.Itoa(max(1, c.job.commit)), "--size", "16", "--transform", "resize",
		"--decoders", "1", "--fetch-concurrency", "2", "--slots", "2", "--progress", "never",
		"--step-time", c.job.stepTime.String(),
	}
	args = append(args, extra...)
	p := startProc(c.t, c.dir, name, c.nodeBin, c.job.env, args...)
	c.nodes = append(c.nodes, p)
	c.nodeArgs = append(c.nodeArgs, args)
	c.nodeLogs = append(c.nodeLogs, filepath.Join(c.dir, log))
	return p
}

// waitLines waits until the file has at least n lines matching re.
func waitLines(t *testing.T, path string, re *regexp.Regexp, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(path)
		if len(re.FindAll(b, -1)) >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: fewer than %d lines matching %s within %v", path, n, re, d)
}

// finish waits for every process still running to exit 0.
func (c *cluster) finish(killed ...*proc) {
	c.t.Helper()
	isKilled := func(p *proc) bool {
		for _, k := range killed {
			if k == p {
				return true
			}
		}
		return false
	}
	for _, p := range c.nodes {
		if isKilled(p) {
			continue
		}
		if err := p.wait(c.t, 2*time.Minute); err != nil {
			c.t.Errorf("%s exited with %v; stderr:\n%s", p.name, err, tail(p.stderr, 30))
		}
	}
	if err := c.coord.wait(c.t, time.Minute); err != nil {
		c.t.Errorf("coordinator exited with %v; stderr:\n%s", err, tail(c.coord.stderr, 30))
	}
}

// coordEvents returns the coordinator's log lines with msg=<msg>, as
// attribute maps.
func (c *cluster) coordEvents(msg string) []map[string]string {
	return procEvents(c.t, c.coord, msg)
}

// procEvents returns p's log lines with msg=<msg>, as attribute maps.
func procEvents(t *testing.T, p *proc, msg string) []map[string]string {
	t.Helper()
	f, err := os.Open(p.stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		attrs := parseSlog(sc.Text())
		if attrs["msg"] == msg {
			out = append(out, attrs)
		}
	}
	return out
}

var slogAttr = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S*)`)

func parseSlog(line string) map[string]string {
	m := map[string]string{}
	for _, kv := range slogAttr.FindAllStringSubmatch(line, -1) {
		v := kv[2]
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		}
		m[kv[1]] = v
	}
	return m
}

func slogTime(t *testing.T, attrs map[string]string) time.Time {
	ts, err := time.Parse(time.RFC3339Nano, attrs["time"])
	if err != nil {
		t.Fatalf("time %q: %v", attrs["time"], err)
	}
	return ts
}

func seconds(attrs map[string]string) float64 {
	f, _ := strconv.ParseFloat(attrs["seconds"], 64)
	return f
}

var _ = context.Background
