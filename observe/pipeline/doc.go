// Package pipeline reads a node's pipeline into observe's neutral
// snapshot: the ranks' actors.Counters, the decoders' abandoned cores,
// the store's request counts (storage.CountingStore, s3.Stats,
// dataset.PackedStats) and the trainers' data-stall reports
// (delivery.TrainerWait). It is the node's side of observability: the
// table of series, the server and the coordinator's status page are in
// observe, which links no pipeline package, so the coordinator links
// none either.
//
// The live report (Reporter) applies the summary's bottleneck rule
// (actors.Stats.Bottleneck) to the interval between two snapshots, so a
// running job names its limiting stage as it goes; the metrics' busy
// ratios, queue occupancies and bottleneck are those of the latest
// interval.
//
// Concurrency: collectors and the Reporter are safe for concurrent use;
// their sources must be too.
package pipeline
