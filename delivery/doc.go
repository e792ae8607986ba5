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
// Both modes take one path: the server serves each rank through a
// SessionStream, which says where a connecting trainer starts (Attach),
// gives batches with their era (NextDelivery) and answers commits
// (Commit). Standalone, the node calls New (and Shutdown) with an
// OpenFunc that starts a rank's stream at a feed.Cursor (Standalone: its
// feeder seeks to the cursor before the pipeline starts); each rank is
// the trivial session, one that never fences: its cluster.RankDelivery
// decides where a trainer resumes and which commits are valid (Resume,
// Opened, Commit, Ack), it reopens the stream when a trainer resumes
// from a cursor the stream has gone past, and a Committer
// (LocalCommitter) makes the tokens. In cluster mode the node
// calls NewSessions with node.ClusterFeed's SessionFunc: its streams
// carry out cluster.RankDelivery's decisions (eras, rollbacks, resets,
// commits waiting for the coordinator's acknowledgement), and the server
// turns a rollback into a rollback message. The mode is the
// constructor's, never found by a type assertion.
//
// # Concurrency and failure contract
//
// Each rank serves one trainer at a time; ranks are independent. A
// session runs two goroutines (one pulls batches and writes descriptors,
// one reads releases and commits); the rank's stream, its delivery state and pending
// batch are guarded by the rank's mutex. A trainer that disconnects or
// crashes has every batch it held released. Malformed or hostile input on
// a socket gets an Error message and a closed connection; it cannot stop
// the node. Shutdown closes listeners and connections, waits for every
// goroutine, then shuts the streams down; it returns ctx.Err() if ctx ends
// first.
//
// Linux only (memfd, SCM_RIGHTS).
package delivery
