// Package delivery is the node's side of trainer delivery: it hands a
// node's batches to trainer processes on the same machine without
// copying pixels, over the protocol of package feed
// (docs/feed-protocol.md).
//
// ShmAllocator is the pipeline's gpu.Allocator: the slot pool is one
// sealed memfd per rank stream, so a batch's pixels are already where the
// trainer can see them.
//
// # Who calls what
//
// The node calls New (and Shutdown) with an OpenFunc that starts a rank's
// stream at a feed.Cursor: Standalone in standalone mode (its feeder
// seeks to the cursor before the pipeline starts). The server calls the
// OpenFunc once per rank at start and again when a trainer resumes from a
// commit the running stream has gone past. Commits go through a
// Committer: LocalCommitter standalone. In cluster mode node.ClusterFeed's
// OpenFunc returns SessionStreams over the agent's ranks: the server then
// lets the stream decide where a trainer resumes (Attach), sends commits
// to the coordinator and answers them on its ack (Commit), and turns a
// rollback into a rollback message.
//
// # Concurrency and failure contract
//
// Each rank serves one trainer at a time; ranks are independent. A
// session runs two goroutines (one pulls batches and writes descriptors,
// one reads releases and commits); the rank's stream, ledger and pending
// batch are guarded by the rank's mutex. A trainer that disconnects or
// crashes has every batch it held released. Malformed or hostile input on
// a socket gets an Error message and a closed connection; it cannot stop
// the node. Shutdown closes listeners and connections, waits for every
// goroutine, then shuts the streams down; it returns ctx.Err() if ctx ends
// first.
//
// Linux only (memfd, SCM_RIGHTS).
package delivery
