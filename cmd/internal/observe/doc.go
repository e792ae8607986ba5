// Package observe makes a running node or coordinator observable: its
// Prometheus metrics, the live bottleneck report, and the HTTP server
// that serves them (loopback unless a bearer token guards it).
//
// One source. The metrics are prometheus.Collectors that read, at scrape
// time, the same snapshots the summary prints: a node's actors.Counters
// (per rank, over every pipeline the rank had), its failure counts by
// stage and class, its store's request counts (storage.CountingStore,
// s3.Stats, dataset.PackedStats); a coordinator's coord.Status (the state
// machine's Stats and Census) and its journal's writes. Nothing here
// counts anything the daemons do not already count, and no label carries
// a per-sample value: labels are stages, ranks, store operations,
// outcomes, failure classes and lease states.
//
// The live report (Reporter) applies the summary's bottleneck rule
// (actors.Stats.Bottleneck) to the interval between two snapshots, so a
// running job names its limiting stage as it goes; the metrics' busy
// ratios, queue occupancies and bottleneck are those of the latest
// interval.
//
// Concurrency: collectors and the Reporter are safe for concurrent use;
// their sources must be too.
package observe
