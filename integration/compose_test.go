//go:build integration

package integration

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The chaos tests run integration/docker-compose.yml — MinIO, the setup
// job, a coordinator and nodes, each its own container — under a compose
// project of their own, break something with the Docker CLI (kill,
// network disconnect, restart), and check the promise from the delivery
// logs the containers write to a host directory. They need a Docker
// engine and the images of `make images`; `make integ` runs them.

const (
	longshoreImage = "longshore/longshore:dev"
	minioImage     = "longshore/minio:local"
)

// stack is one compose project.
type stack struct {
	t       *testing.T
	project string
	logDir  string
	env     []string
	file    string

	mu       sync.Mutex
	failures []string // what Errorf reported, repeated after the containers' logs
}

// Errorf reports a failure of the test, and keeps it: teardown repeats
// the failures after the containers' logs, which would otherwise push
// them out of the tail of a CI log.
func (s *stack) Errorf(format string, args ...any) {
	s.t.Helper()
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.failures = append(s.failures, msg)
	s.mu.Unlock()
	s.t.Error(msg)
}

// Fatalf is Errorf, and ends the test.
func (s *stack) Fatalf(format string, args ...any) {
	s.t.Helper()
	s.Errorf(format, args...)
	s.t.FailNow()
}

// settings are the compose file's ${VAR} values for a chaos run: small
// images, a short simulated training step, and the loopback gossip
// profile (the containers share one bridge on one host).
func chaosSettings() map[string]string {
	return map[string]string{
		"DATASET_SIZE":             "960",
		"LONGSHORE_EPOCHS":         "2",
		"LONGSHORE_BATCH_SIZE":     "8",
		"LONGSHORE_SHARD_SIZE":     "16",
		"LONGSHORE_COMMIT_EVERY":   "2",
		"LONGSHORE_STEP_TIME":      "150ms",
		"LONGSHORE_SIZE":           "32",
		"LONGSHORE_TRANSFORM":      "resize",
		"LONGSHORE_DECODERS":       "1",
		"LONGSHORE_GOSSIP_PROFILE": "local",
		"LONGSHORE_LINGER":         "20s",
		"LONGSHORE_MIN_RANKS":      "6",
	}
}

// startStack brings up services (all but node3 if none are named) of a
// fresh project with settings, and registers the teardown: on failure the
// containers' logs go to the test log; then `down -v` removes containers,
// network and volumes, and the test fails if any is left.
func startStack(t *testing.T, settings map[string]string, services ...string) *stack {
	t.Helper()
	for _, img := range []string{longshoreImage, minioImage} {
		if err := exec.Command("docker", "image", "inspect", img).Run(); err != nil {
			t.Fatalf("image %s missing: run `make images` first", img)
		}
	}
	file, err := filepath.Abs("docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	rand.Read(b[:])
	s := &stack{t: t, project: "lschaos" + hex.EncodeToString(b[:]), logDir: t.TempDir(), file: file}
	env := os.Environ()
	env = append(env, "LONGSHORE_LOG_DIR="+s.logDir)
	for k, v := range settings {
		env = append(env, k+"="+v)
	}
	t.Cleanup(s.teardown)
	if len(services) == 0 {
		services = []string{"minio", "setup", "coordinator", "node1", "node2"}
		if settings["LONGSHORE_MIN_RANKS"] != "4" {
			services = append(services, "node3")
		}
	}
	// The network's subnet is fixed per project (so a container can be
	// reconnected at its old address); pick another if one is taken.
	for try := 0; ; try++ {
		subnet := fmt.Sprintf("10.%d.%d.0/24", 200+mrand.IntN(50), mrand.IntN(256))
		s.env = append(env, "LONGSHORE_SUBNET="+subnet)
		out, err := s.compose(append([]string{"up", "-d", "--no-color"}, services...)...)
		_ = out
		if err == nil {
			break
		}
		if try < 5 && strings.Contains(err.Error(), "overlap") {
			s.compose("down", "-v", "--remove-orphans")
			continue
		}
		t.Fatalf("docker-compose up: %v", err)
	}
	return s
}

// compose runs docker-compose on the project and returns its output.
func (s *stack) compose(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Every profile is active, so that ps, logs and down see the packed
	// profile's service too; up names its services, so only those start.
	cmd := exec.CommandContext(ctx, "docker-compose", append([]string{"--profile", "packed", "-p", s.project, "-f", s.file}, args...)...)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker-compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (s *stack) mustCompose(args ...string) string {
	s.t.Helper()
	out, err := s.compose(args...)
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

func docker(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// container returns the id of service's container.
func (s *stack) container(service string) string {
	s.t.Helper()
	id := strings.TrimSpace(s.mustCompose("ps", "-q", service))
	if id == "" {
		s.Fatalf("no container for %s", service)
	}
	return id
}

func (s *stack) network() string { return s.project + "_longshore" }

// waitExit waits for service's container to exit and returns its status.
func (s *stack) waitExit(service string, d time.Duration) int {
	s.t.Helper()
	id := s.container(service)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "wait", id).Output()
	if err != nil {
		s.Fatalf("%s did not exit within %v", service, d)
	}
	var code int
	fmt.Sscan(string(out), &code)
	return code
}

// finish waits for the coordinator and the named nodes to exit 0.
func (s *stack) finish(d time.Duration, nodes ...string) {
	s.t.Helper()
	for _, svc := range append(nodes, "coordinator") {
		if code := s.waitExit(svc, d); code != 0 {
			s.Errorf("%s exited %d", svc, code)
		}
	}
}

func (s *stack) teardown() {
	t := s.t
	if t.Failed() {
		out, _ := s.compose("logs", "--no-color", "--timestamps")
		t.Logf("containers' logs (project %s):\n%s", s.project, lastLines(out, 400))
		// Keep the delivery logs for a post-mortem (t.TempDir goes away).
		keep := filepath.Join(os.TempDir(), "longshore-chaos-"+s.project)
		if err := exec.Command("cp", "-r", s.logDir, keep).Run(); err == nil {
			os.WriteFile(filepath.Join(keep, "containers.log"), []byte(out), 0o644)
			t.Logf("delivery logs and containers' logs kept in %s", keep)
		}
		s.mu.Lock()
		if len(s.failures) > 0 {
			t.Logf("the failures above, again:\n  %s", strings.Join(s.failures, "\n  "))
		} else {
			t.Logf("the failure is above the containers' logs (a Fatal, or a check outside the stack)")
		}
		s.mu.Unlock()
	}
	if out, err := s.compose("down", "-v", "--remove-orphans", "-t", "2"); err != nil {
		t.Errorf("teardown: %v\n%s", err, out)
	}
	label := "label=com.docker.compose.project=" + s.project
	for _, kind := range [][]string{{"ps", "-aq"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}} {
		args := append(kind, "--filter", label)
		if left := docker(t, args...); left != "" {
			t.Errorf("teardown left docker %s: %s", kind[0], left)
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitDelivered waits until node's log holds a line of epoch's step
// (any rank), i.e. the node is mid-epoch.
func (s *stack) waitDelivered(node string, epoch, step int, d time.Duration) {
	s.t.Helper()
	re := regexp.MustCompile(fmt.Sprintf(`(?m)^%d\t%s/\d+\t%d\t`, epoch, node, step))
	waitLines(s.t, filepath.Join(s.logDir, node+".log"), re, 1, d)
}

// check reads the delivery logs and the coordinator's ack log and checks
// exactly once in committed history for every epoch.
func (s *stack) check(epochs int) *history {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join(s.logDir, "dataset.keys"))
	if err != nil {
		s.t.Fatal(err)
	}
	keys := strings.Fields(string(b))
	logs, _ := filepath.Glob(filepath.Join(s.logDir, "node*.log"))
	h, err := readHistory(logs, filepath.Join(s.logDir, "coord.acks"))
	if err != nil {
		s.t.Fatal(err)
	}
	if ps := append(h.check(keys, epochs), h.checkResume()...); len(ps) > 0 {
		s.Errorf("the promise is broken:\n  %s", strings.Join(ps, "\n  "))
	}
	return h
}

// checkLives checks the coordinator's ack log shows want lives, every one
// after the first continuing from the journal.
func (s *stack) checkLives(h *history, want int) {
	s.t.Helper()
	if len(h.lives) != want {
		s.Errorf("commit log shows %d coordinator lives, want %d", len(h.lives), want)
	}
	for i, l := range h.lives {
		if i > 0 && l.restored == 0 {
			s.Errorf("coordinator life %d started fresh; it should have continued from the journal", i+1)
		}
	}
}

// checkEqualCommitted checks that in epoch e every rank that live
// accepts trained on the same number of committed batches, counted over
// all its sessions: a session that ends (its node killed, the coordinator
// restored) is followed by a new one that takes over from the rank's last
// commit.
func checkEqualCommitted(s *stack, h *history, e int, live func(rank string) bool) {
	s.t.Helper()
	st := map[string]int64{}
	for k := range h.delivered {
		if a, ok := h.acked[k.sessionEpoch]; ok && k.epoch == e && k.step <= a && live(k.rank) {
			st[k.rank]++
		}
	}
	var want int64 = -1
	for _, n := range st {
		if want >= 0 && n != want {
			s.Errorf("epoch %d: unequal committed steps per rank: %v", e, st)
			return
		}
		want = n
	}
	if len(st) == 0 {
		s.Errorf("epoch %d: no rank committed anything", e)
	}
}

// checkEqualStepsAfterRestore checks that in epoch e the rank sessions
// the restored coordinator started (the newest life: the number before
// the dot of a session) all ran the same number of steps, and
// returns the committed batches per rank over all sessions. Those sums
// need not be equal: the stand-in trainers commit independently, so ranks
// are cut at different steps and the restored coordinator splits the
// epoch's uncommitted rest equally among the ranks present (a data-parallel
// trainer commits one global step, and then the sums are equal too).
func checkEqualStepsAfterRestore(s *stack, h *history, e int) map[string]int64 {
	s.t.Helper()
	gen := sessionLife
	var newest uint64
	for k := range h.delivered {
		if k.epoch == e {
			newest = max(newest, gen(k.session))
		}
	}
	st := h.stepsOf(e, func(session string) bool { return gen(session) == newest })
	var want int64 = -1
	for _, n := range st {
		if want >= 0 && n != want {
			s.Errorf("epoch %d: unequal steps among the sessions of coordinator life %d: %v", e, newest, st)
			break
		}
		want = n
	}
	sums := map[string]int64{}
	for k := range h.delivered {
		if a, ok := h.acked[k.sessionEpoch]; ok && k.epoch == e && k.step <= a {
			sums[k.rank]++
		}
	}
	return sums
}

// coordEvents returns the coordinator container's log lines with
// msg=<msg>, as attribute maps.
func (s *stack) coordEvents(msg string) []map[string]string {
	s.t.Helper()
	out, _ := s.compose("logs", "--no-color", "coordinator")
	var evs []map[string]string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "| "); i >= 0 {
			line = line[i+2:]
		}
		if a := parseSlog(line); a["msg"] == msg {
			evs = append(evs, a)
		}
	}
	return evs
}

// firstAfter is the time from t0 to the first coordinator event msg (with
// attrs matching, if given) after t0; -1 if none.
func (s *stack) firstAfter(t0 time.Time, msg string, attrs map[string]string) time.Duration {
	s.t.Helper()
next:
	for _, ev := range s.coordEvents(msg) {
		for k, v := range attrs {
			if ev[k] != v {
				continue next
			}
		}
		if at := slogTime(s.t, ev); at.After(t0) {
			return at.Sub(t0)
		}
	}
	return -1
}

// waitCoordEvent waits until the coordinator logs msg (attrs matching)
// after t0, polling its log; it fails the test after d.
func (s *stack) waitCoordEvent(t0 time.Time, msg string, attrs map[string]string, d time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for s.firstAfter(t0, msg, attrs) < 0 {
		if time.Now().After(deadline) {
			s.Fatalf("no coordinator event %q %v within %v", msg, attrs, d)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkMidEpoch fails the test unless epoch completed after t0, i.e.
// the fault at t0 really hit it running.
func (s *stack) checkMidEpoch(t0 time.Time, epoch int) {
	s.t.Helper()
	if s.firstAfter(t0, "epoch complete", map[string]string{"epoch": strconv.Itoa(epoch)}) < 0 {
		s.Errorf("epoch %d completed before the fault: the test did not hit a running epoch", epoch)
	}
}

func (s *stack) logEpochs() {
	for _, ev := range s.coordEvents("epoch complete") {
		s.t.Logf("epoch %s: %.2f s", ev["epoch"], seconds(ev))
	}
}

func nodeOf(rankSession string) string { return strings.SplitN(rankSession, "/", 2)[0] }

// TestChaosKillNode (1): docker kill a node mid-epoch. The survivors
// finish the job; the killed node's uncommitted work is re-issued; exactly
// once holds in committed history.
func TestChaosKillNode(t *testing.T) {
	s := startStack(t, chaosSettings())
	s.waitDelivered("node3", 0, 3, 2*time.Minute)
	killed := time.Now()
	docker(t, "kill", s.container("node3"))
	s.finish(3*time.Minute, "node1", "node2")
	s.checkMidEpoch(killed, 0)
	h := s.check(2)
	for e := range 2 {
		checkEqualCommitted(s, h, e, func(r string) bool { return nodeOf(r) != "node3" })
	}
	detect := s.firstAfter(killed, "node failed", map[string]string{"node": "node3"})
	reissue := s.firstAfter(killed, "reassigned", nil)
	t.Logf("docker kill → failure noticed %.2f s, → first lease re-issued %.2f s (local gossip profile)", detect.Seconds(), reissue.Seconds())
	if detect < 0 {
		s.Errorf("the coordinator never noticed the kill")
	}
	s.logEpochs()
}

// TestChaosPartitionNode (3): disconnect a node from the network for
// longer than failure detection, then reconnect it at its address. Its
// leases are re-issued while it is away; whatever it delivers with them
// afterwards is fenced (never acknowledged), so nothing is duplicated in
// committed history, and the job completes.
func TestChaosPartitionNode(t *testing.T) {
	set := chaosSettings()
	set["LONGSHORE_EPOCHS"] = "8" // the job must outlast the partition and the rejoin
	s := startStack(t, set)
	s.waitDelivered("node2", 0, 3, 2*time.Minute)
	id := s.container("node2")
	ip := docker(t, "inspect", "-f", fmt.Sprintf(`{{(index .NetworkSettings.Networks %q).IPAddress}}`, s.network()), id)
	cut := time.Now()
	docker(t, "network", "disconnect", s.network(), id)
	// Keep the partition until the coordinator declares node2 failed. A
	// fixed wait is a race: memberlist's suspicion timeout shrinks with
	// confirmations from other members, and with none it is 6x the
	// minimum (local profile, 4 members: 10.8 s after the first failed
	// probe), so 12 s of partition was sometimes healed and refuted first.
	s.waitCoordEvent(cut, "node failed", map[string]string{"node": "node2"}, 90*time.Second)
	docker(t, "network", "connect", "--ip", ip, "--alias", "node2", s.network(), id)
	healed := time.Now()
	s.finish(3*time.Minute, "node1", "node2", "node3")
	s.checkMidEpoch(cut, 0)
	h := s.check(8)
	if s.firstAfter(healed, "job done", nil) < 0 {
		s.Errorf("the job finished before the partition healed: nothing shows the stale leases were fenced")
	}
	detect := s.firstAfter(cut, "node failed", map[string]string{"node": "node2"})
	reissue := s.firstAfter(cut, "reassigned", nil)
	rejoin := s.firstAfter(healed, "node joined", map[string]string{"node": "node2"})
	t.Logf("disconnect → failure noticed %.2f s, → first lease re-issued %.2f s; reconnect (after %.0f s) → node2 rejoined %.2f s",
		detect.Seconds(), reissue.Seconds(), healed.Sub(cut).Seconds(), rejoin.Seconds())
	if detect < 0 {
		s.Errorf("the coordinator never noticed the partition")
	}
	fenced := 0
	for k := range h.delivered {
		if nodeOf(k.rank) == "node2" {
			if a, ok := h.acked[k.sessionEpoch]; !ok || k.step > a {
				fenced++
			}
		}
	}
	t.Logf("node2 delivered %d steps never acknowledged (fenced or uncommitted)", fenced)
	s.logEpochs()
}

// TestChaosMinIORestart (5): MinIO restarted mid-epoch. Fetches retry
// across the outage and the job completes with exactly once intact.
func TestChaosMinIORestart(t *testing.T) {
	s := startStack(t, chaosSettings())
	s.restartMinIOMidEpoch()
	s.logEpochs()
}

// restartMinIOMidEpoch restarts MinIO once node1 is into epoch 0, lets
// the job finish and checks the promise and equal steps.
func (s *stack) restartMinIOMidEpoch() {
	t := s.t
	t.Helper()
	s.waitDelivered("node1", 0, 3, 2*time.Minute)
	t0 := time.Now()
	docker(t, "restart", "-t", "1", s.container("minio"))
	t.Logf("minio restarted in %.2f s", time.Since(t0).Seconds())
	s.finish(3*time.Minute, "node1", "node2", "node3")
	s.checkMidEpoch(t0, 0)
	h := s.check(2)
	for e := range 2 {
		checkEqualCommitted(s, h, e, func(string) bool { return true })
	}
}

// TestChaosMinIORestartPacked (5, packed): the MinIO restart over a packed
// dataset (tar shards read a chunk at a time): chunk fetches that fail in
// the outage are retried, every fetcher waiting for a chunk gets its
// outcome, and the job completes with exactly once intact against the
// uploaded keys.
func TestChaosMinIORestartPacked(t *testing.T) {
	set := chaosSettings()
	set["DATASET_URL"] = "s3://data/train-packed"
	set["PACK_PER_SHARD"] = "64"
	s := startStack(t, set, "minio", "setup", "pack")
	if code := s.waitExit("pack", 2*time.Minute); code != 0 {
		s.Fatalf("pack exited %d", code)
	}
	s.mustCompose("up", "-d", "--no-color", "coordinator", "node1", "node2", "node3")
	s.restartMinIOMidEpoch()
	// The nodes did read chunks (the packed path, not a sample at a time).
	for _, node := range []string{"node1", "node2", "node3"} {
		out, _ := s.compose("logs", "--no-color", node)
		m := regexp.MustCompile(`chunk cache.*chunks=(\d+)`).FindStringSubmatch(out)
		if m == nil || m[1] == "0" {
			s.Errorf("%s: no chunk reads in its log (%q)", node, m)
		} else {
			t.Logf("%s: %s chunk reads", node, m[1])
		}
	}
	s.logEpochs()
}

// TestChaosJoinMidEpoch (6): a third node started while epoch 0 runs
// joins by gossip and takes work; the promise holds.
func TestChaosJoinMidEpoch(t *testing.T) {
	set := chaosSettings()
	set["LONGSHORE_MIN_RANKS"] = "4"
	// A long epoch 0: the joiner must arrive before its last lease is
	// granted (ranks read ahead, so that is well before it completes).
	// node3 joins 5-7 s after `up`; at 150 ms a step the last lease of
	// epoch 0 went out 7.3 s into it once, before node3 was in. At 300 ms
	// that is ~14 s.
	set["DATASET_SIZE"] = "1920"
	set["LONGSHORE_STEP_TIME"] = "300ms"
	s := startStack(t, set)
	s.waitDelivered("node1", 0, 1, 2*time.Minute)
	started := time.Now()
	s.mustCompose("up", "-d", "--no-color", "node3")
	s.finish(3*time.Minute, "node1", "node2", "node3")
	s.checkMidEpoch(started, 0)
	h := s.check(2)
	got, pad, uncommitted := 0, 0, 0
	for k, ss := range h.delivered {
		if nodeOf(k.rank) == "node3" && k.epoch == 0 {
			for _, x := range ss {
				got++
				if x.pad {
					pad++
				}
				if a, ok := h.acked[k.sessionEpoch]; !ok || k.step > a {
					uncommitted++
				}
			}
		}
	}
	t.Logf("node3 in epoch 0: %d samples delivered, %d of them padding, %d in steps never committed", got, pad, uncommitted)
	joined := s.firstAfter(started, "node joined", map[string]string{"node": "node3"})
	t.Logf("docker-compose up node3 → joined %.2f s; it delivered %d samples of epoch 0, committed %v", joined.Seconds(), got, h.samplesBy(0))
	if got == 0 {
		why := ""
		if granted := s.firstAfter(started, "epoch started", map[string]string{"epoch": "1"}); granted >= 0 && granted < joined {
			why = fmt.Sprintf(" (every lease of epoch 0 was granted %.2f s after the start, before it joined)", granted.Seconds())
		}
		s.Errorf("the node that joined mid-epoch 0 delivered nothing of it%s", why)
	}
	if share := h.samplesBy(1); share["node3/0"] == 0 || share["node3/1"] == 0 {
		s.Errorf("the joiner's ranks took no real samples of epoch 1: %v", share)
	}
	s.logEpochs()
}

// TestChaosKillCoordinator (2): docker kill the coordinator mid-epoch and
// start it again. It continues from its journal in MinIO (--checkpoint),
// the nodes carry on with it, and exactly once holds across the restart.
func TestChaosKillCoordinator(t *testing.T) {
	set := chaosSettings()
	set["LONGSHORE_EPOCHS"] = "3"
	set["LONGSHORE_CHECKPOINT"] = "s3://data/jobs/chaos"
	s := startStack(t, set)
	s.waitDelivered("node1", 0, 4, 2*time.Minute)
	id := s.container("coordinator")
	killed := time.Now()
	docker(t, "kill", id)
	time.Sleep(3 * time.Second) // the nodes notice it is gone
	docker(t, "start", id)
	restarted := time.Now()
	s.finish(3*time.Minute, "node1", "node2", "node3")
	s.checkMidEpoch(killed, 0)
	h := s.check(3)
	s.checkLives(h, 2)
	for e := range 3 {
		t.Logf("epoch %d: committed batches per rank over all sessions %v", e, checkEqualStepsAfterRestore(s, h, e))
	}
	cont := s.firstAfter(killed, "journal: continuing", nil)
	ack := time.Duration(-1)
	for _, ev := range s.coordEvents("epoch complete") {
		if at := slogTime(t, ev); at.After(killed) {
			ack = at.Sub(killed)
			break
		}
	}
	t.Logf("docker kill coordinator → started again after %.1f s → continuing from the journal %.2f s after the kill; next epoch complete %.2f s after the kill",
		restarted.Sub(killed).Seconds(), cont.Seconds(), ack.Seconds())
	if cont < 0 {
		s.Errorf("the restarted coordinator did not continue from its journal")
	}
	s.logEpochs()
}

// TestChaosRestartAll (4): docker kill every container mid-epoch (MinIO
// too; its data is a volume), then bring the project up again. The
// coordinator continues from its journal, the nodes join with new
// sessions, and exactly once holds over the whole history.
func TestChaosRestartAll(t *testing.T) {
	set := chaosSettings()
	set["LONGSHORE_EPOCHS"] = "3"
	set["LONGSHORE_CHECKPOINT"] = "s3://data/jobs/chaos"
	s := startStack(t, set)
	s.waitDelivered("node1", 1, 2, 2*time.Minute)
	killed := time.Now()
	s.mustCompose("kill")
	s.mustCompose("up", "-d", "--no-color", "minio", "setup", "coordinator", "node1", "node2", "node3")
	restarted := time.Now()
	s.finish(3*time.Minute, "node1", "node2", "node3")
	s.checkMidEpoch(killed, 1)
	h := s.check(3)
	s.checkLives(h, 2)
	for e := range 3 {
		t.Logf("epoch %d: committed batches per rank over all sessions %v", e, checkEqualStepsAfterRestore(s, h, e))
	}
	cont := s.firstAfter(killed, "journal: continuing", nil)
	t.Logf("docker-compose kill → up again after %.1f s → coordinator continuing from the journal %.2f s after the kill",
		restarted.Sub(killed).Seconds(), cont.Seconds())
	if cont < 0 {
		s.Errorf("the coordinator did not continue from its journal after the restart")
	}
	s.logEpochs()
}
