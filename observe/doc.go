// Package observe makes a running node or coordinator observable: its
// Prometheus metrics, the coordinator's status page, the node's report
// to it, and the HTTP server that serves them (loopback unless a bearer
// token guards it).
//
// One table. Every series the daemons export is one row of Metrics
// (series.go): its name, type, help and labels (contracts: never rename
// one) and how its samples are read from a Snapshot (snapshot.go), the
// neutral form of what a daemon counts. The same rows feed the
// Prometheus collectors (Table.Collector), the node's report for the
// coordinator's status page (Table.NodeReport) and the status page's
// counters and progress (StatusPage): a row whose Figure names a place
// on them is read there through the row. A new metric is a row, and a
// Snapshot field filled where its number is counted.
//
// One source. The snapshots are taken at scrape time from what the
// daemons already count: a coordinator's coord.Status (the state
// machine's Stats and Census) and its journal's writes (JournalMeter);
// a node's actors.Counters, failures, store counts and trainers'
// reports, read by observe/pipeline, the node's side, which alone links
// the pipeline (the coordinator links observe and none of it). No label
// carries a per-sample value: labels are stages, ranks, store
// operations, outcomes, failure classes and lease states.
//
// Concurrency: collectors, the status page and JournalMeter are safe for
// concurrent use; their sources must be too.
package observe
