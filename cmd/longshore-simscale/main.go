// Command longshore-simscale runs one job at internet scale in one
// process (package cluster/scalesim): the real coordinator state machine,
// the real node side of every rank and the real journal codec, in
// simulated time, with node churn. It prints the figures issue 16 asks
// for and, with --json, writes them. make sim-scale runs it at the
// default size: 4,096 nodes × 8 ranks, a billion samples, one epoch,
// 1%/hour churn.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/longshore/longshore/cluster/scalesim"
	"github.com/longshore/longshore/cmd/internal/version"
)

func main() {
	version.Exit("longshore-simscale")
	d := scalesim.DefaultConfig()
	cfg := d
	flag.IntVar(&cfg.Nodes, "nodes", d.Nodes, "nodes")
	flag.IntVar(&cfg.RanksPerNode, "ranks", d.RanksPerNode, "ranks per node")
	flag.Int64Var(&cfg.Samples, "samples", d.Samples, "samples in the dataset")
	flag.IntVar(&cfg.Epochs, "epochs", d.Epochs, "epochs")
	flag.IntVar(&cfg.ShardSize, "shard-size", d.ShardSize, "positions per lease (0: the coordinator's default)")
	flag.Int64Var(&cfg.Batch, "batch", d.Batch, "each trainer's batch size")
	flag.Int64Var(&cfg.CommitEvery, "commit-every", d.CommitEvery, "a trainer commits every this many batches")
	flag.Float64Var(&cfg.Rate, "rate", d.Rate, "samples a rank consumes per simulated second")
	flag.Float64Var(&cfg.ChurnPerHour, "churn", d.ChurnPerHour, "fraction of nodes killed per simulated hour")
	flag.Float64Var(&cfg.SlowFraction, "slow", d.SlowFraction, "fraction of nodes whose ranks are slow")
	flag.Int64Var(&cfg.DetectSeconds, "detect", d.DetectSeconds, "seconds from a kill to gossip's failure report")
	flag.Int64Var(&cfg.RestartSeconds, "restart", d.RestartSeconds, "seconds from a kill to the node's next life")
	flag.Uint64Var(&cfg.Seed, "seed", d.Seed, "seed")
	flag.IntVar(&cfg.LiveEvery, "live-every", 600, "force a collection every this many simulated seconds to measure the live heap (0: never)")
	out := flag.String("json", "", "write the report as JSON to this file")
	quiet := flag.Bool("quiet", false, "no progress lines")
	flag.Parse()
	if !*quiet {
		cfg.Progress = func(s string) { fmt.Fprintln(os.Stderr, "longshore-simscale:", s) }
	}
	rep, err := scalesim.Run(cfg)
	print(rep)
	if *out != "" {
		b, _ := json.MarshalIndent(struct {
			scalesim.Result
			Progress             any     `json:"Progress,omitempty"`
			LeaseOpsPerSecond    float64 `json:"lease_ops_per_second"`
			EventsPerSecond      float64 `json:"events_per_second"`
			GenerationsPerMinute float64 `json:"generations_per_minute"`
			GoVersion, CPU       string
			Cores                int
			Error                string `json:",omitempty"`
		}{Result: rep, LeaseOpsPerSecond: rep.LeaseOpsPerSecond(), EventsPerSecond: rep.EventsPerSecond(),
			GenerationsPerMinute: rep.GenerationsPerMinute(), GoVersion: runtime.Version(), CPU: cpuModel(),
			Cores: runtime.NumCPU(), Error: errString(err)}, "", "  ")
		if werr := os.WriteFile(*out, append(b, '\n'), 0o644); werr != nil {
			fmt.Fprintln(os.Stderr, "longshore-simscale:", werr)
			os.Exit(1)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "longshore-simscale:", err)
		os.Exit(1)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func print(r scalesim.Result) {
	mib := func(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	fmt.Printf("| figure | value |\n|---|---|\n")
	row := func(k string, v any) { fmt.Printf("| %s | %v |\n", k, v) }
	row("nodes × ranks", fmt.Sprintf("%d × %d = %d", r.Nodes, r.RanksPerNode, r.Nodes*r.RanksPerNode))
	row("samples × epochs", fmt.Sprintf("%d × %d", r.Samples, r.Epochs))
	row("simulated time", (time.Duration(r.SimSeconds) * time.Second).String())
	row("wall time", r.WallTime.Round(time.Second))
	row("kills (churn)", fmt.Sprintf("%d (%.1f%%/hour)", r.Kills, 100*r.ChurnPerHour))
	row("joins (first and rejoins)", r.Joins)
	row("peak heap, whole simulation (bounds the coordinator's)", mib(r.PeakHeapBytes))
	row("peak live heap after a forced collection, whole simulation", mib(r.PeakLiveHeapBytes))
	row("coordinator time (one core)", r.CoordTime.Round(time.Millisecond))
	row("events", r.Events)
	row("events/s of coordinator time", fmt.Sprintf("%.0f", r.EventsPerSecond()))
	row("lease operations (requests, progress, lease-dones, commits, grants, revokes)", r.LeaseOps)
	row("lease operations/s of coordinator time", fmt.Sprintf("%.0f", r.LeaseOpsPerSecond()))
	row("journal generations", r.Generations)
	row("journal bytes per generation (max / mean)", fmt.Sprintf("%d / %.0f", r.MaxGenBytes, r.MeanGenBytes))
	row("generations per simulated minute", fmt.Sprintf("%.1f", r.GenerationsPerMinute()))
	row("kill → work re-leased (max / mean, simulated s)", fmt.Sprintf("%d / %.1f", r.MaxReissueSeconds, r.MeanReissueSeconds))
	row("positions returned by dead ranks", r.Returned)
	row("committed positions", r.Committed)
	row("samples committed twice / never", fmt.Sprintf("%d / %d", r.Duplicates, r.Missing))
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
