package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/longshore/longshore/internal/testports"
)

// chromiumBinary finds Debian's chromium, installing it through
// scripts/deps.sh when it is missing.
func chromiumBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if out, err := exec.Command("../scripts/deps.sh", "observe").CombinedOutput(); err != nil {
		t.Fatalf("scripts/deps.sh observe: %v\n%s", err, out)
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not on PATH after scripts/deps.sh observe: %v", err)
	}
	return p
}

// browser is headless chromium loading one page.
type browser struct {
	t       *testing.T
	bin     string
	profile string
}

// run loads url, lets its script run for a few seconds of virtual time
// (the page fetches status.json every second), and returns chromium's
// output for the mode flags given (--dump-dom, --screenshot=...).
func (b browser) run(url string, mode ...string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--user-data-dir=" + b.profile, "--virtual-time-budget=3000", "--window-size=1280,1100"}, mode...)
	out, err := exec.CommandContext(ctx, b.bin, append(args, url)...).Output()
	if err != nil {
		b.t.Fatalf("chromium %v: %v", mode, err)
	}
	return string(out)
}

// pageStatus is what the test reads of status.json (the page's source)
// to know when to look at the page.
type pageStatus struct {
	Progress struct {
		Committed int64 `json:"committed"`
	} `json:"progress"`
	Nodes []struct {
		Node  string `json:"node"`
		State string `json:"state"`
	} `json:"nodes"`
}

func getStatus(t *testing.T, base string) (pageStatus, bool) {
	var s pageStatus
	resp, err := http.Get(base + "/status.json")
	if err != nil {
		return s, false
	}
	defer resp.Body.Close()
	return s, resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&s) == nil
}

// waitStatus polls status.json until ok says its content is what the
// test waits for.
func waitStatus(t *testing.T, base string, d time.Duration, what string, ok func(pageStatus) bool) pageStatus {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if s, got := getStatus(t, base); got && ok(s) {
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("status.json never showed %s within %v", what, d)
	return pageStatus{}
}

var (
	nodeRow = regexp.MustCompile(`<tr data-node="([^"]+)" data-state="([^"]+)"`)
	percent = regexp.MustCompile(`<span id="percent">([0-9.]+)%</span>`)
)

// pageView is what the rendered page shows.
type pageView struct {
	states  map[string]string
	percent float64
	loaded  bool
}

func viewOf(dom string) pageView {
	v := pageView{states: map[string]string{}, loaded: regexp.MustCompile(`<body[^>]*data-loaded="true"`).MatchString(dom)}
	for _, m := range nodeRow.FindAllStringSubmatch(dom, -1) {
		v.states[m[1]] = m[2]
	}
	if m := percent.FindStringSubmatch(dom); m != nil {
		v.percent, _ = strconv.ParseFloat(m[1], 64)
	}
	return v
}

// TestStatusPageInBrowser loads the coordinator's status page in
// headless chromium during a 2-node job: the page loads, shows both
// nodes alive and the job's progress, the progress moves, and a node
// killed with SIGKILL turns evicted. It saves screenshots (the last as
// docs/status-page.png with LONGSHORE_UPDATE_DOCS=1).
func TestStatusPageInBrowser(t *testing.T) {
	b := browser{t: t, bin: chromiumBinary(t), profile: t.TempDir()}
	dir, _ := makeDataset(t, 240)
	for i := range 3 { // failures for the page to list
		if err := os.WriteFile(filepath.Join(dir, "c1", fmt.Sprintf("zz_corrupt%d.jpg", i)), []byte("\xff\xd8\xff\xdbnot a JPEG"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	web := testports.Addr(t, "127.0.0.1")
	base := "http://" + web
	// More epochs than the test ever sees: on a loaded machine headless
	// Chromium takes many seconds a page, and a 40-epoch job could end
	// before the node is killed. The processes are stopped at the end.
	c := startCluster(t, job{dataset: dir, epochs: 1000, batch: 8, shard: 16, balance: "equal", commit: 2, minRanks: 4,
		stepTime: 50 * time.Millisecond, extraCoord: []string{"--http", web, "--checkpoint", filepath.Join(t.TempDir(), "journal")}})
	c.addNode("--max-failures", "1000")
	c.addNode("--max-failures", "1000")
	alive := func(s pageStatus) bool {
		n := 0
		for _, nd := range s.Nodes {
			if nd.State == "alive" {
				n++
			}
		}
		return n == 2 && s.Progress.Committed > 0
	}
	waitStatus(t, base, time.Minute, "two nodes alive and commits", alive)
	v1 := viewOf(b.run(base+"/", "--dump-dom"))
	if !v1.loaded || v1.states["n1"] != "alive" || v1.states["n2"] != "alive" {
		t.Fatalf("first view: %+v, want the page loaded with n1 and n2 alive", v1)
	}

	// The progress moves: once status.json is well past the first view,
	// so is the page.
	s1, _ := getStatus(t, base)
	waitStatus(t, base, time.Minute, "more commits", func(s pageStatus) bool { return s.Progress.Committed > s1.Progress.Committed+200 })
	v2 := viewOf(b.run(base+"/", "--dump-dom"))
	if v2.percent <= v1.percent {
		t.Errorf("progress did not move on the page: %.1f%% then %.1f%%", v1.percent, v2.percent)
	}
	artifacts := os.Getenv("LONGSHORE_ARTIFACTS")
	if artifacts == "" {
		artifacts = t.TempDir()
	}
	b.run(base+"/", "--screenshot="+filepath.Join(artifacts, "status-page-running.png"))

	// A node killed: the page shows it evicted, the other alive.
	// On its way it is suspect once the coordinator's own gossip probe
	// of it fails (a suspicion only gossiped to the coordinator by n1
	// is not seen, and the window is seconds), or silent: the states
	// it passed through are logged; none but those may appear.
	c.nodes[1].kill(t)
	var passed []string
	waitStatus(t, base, time.Minute, "n2 evicted", func(s pageStatus) bool {
		for _, nd := range s.Nodes {
			if nd.Node == "n2" {
				if len(passed) == 0 || passed[len(passed)-1] != nd.State {
					passed = append(passed, nd.State)
				}
				return nd.State == "evicted"
			}
		}
		return false
	})
	for _, st := range passed[:len(passed)-1] {
		if st != "alive" && st != "suspect" && st != "silent" {
			t.Errorf("n2 went %v after its kill: only alive, suspect and silent may come before evicted", passed)
		}
	}
	t.Logf("n2 after its kill: %v", passed)
	dom := b.run(base+"/", "--dump-dom")
	v3 := viewOf(dom)
	if v3.states["n2"] != "evicted" || v3.states["n1"] != "alive" {
		t.Errorf("after the kill the page shows %v, want n1 alive and n2 evicted", v3.states)
	}
	if !regexp.MustCompile(`<li>decode/[a-z_]+: \d+</li>`).MatchString(dom) {
		t.Errorf("the page lists no decode failures")
	}
	shot := filepath.Join(artifacts, "status-page-evicted.png")
	b.run(base+"/", "--screenshot="+shot)
	if st, err := os.Stat(shot); err != nil || st.Size() < 10000 {
		t.Errorf("screenshot %s: %v", shot, err)
	}
	if os.Getenv("LONGSHORE_UPDATE_DOCS") == "1" {
		png, err := os.ReadFile(shot)
		if err == nil {
			err = os.WriteFile("../docs/status-page.png", png, 0o644)
		}
		if err != nil {
			t.Error(err)
		}
	}
	t.Logf("page: %.1f%% then %.1f%% (%s); after the kill %v; screenshots in %s", v1.percent, v2.percent, fmt.Sprint(v2.states), v3.states, artifacts)
	// The job would run for long: the cleanup kills the coordinator and
	// n1 (jobs that end are the other integration tests' business).
}
