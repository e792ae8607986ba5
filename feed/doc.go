// Package feed is the trainer's side of trainer delivery: the Go client
// (Dial, Client.Next, Client.Commit) and the wire protocol a node's feed
// server speaks (docs/feed-protocol.md), with nothing of the node: it
// imports only the standard library, so a Go trainer that uses it links
// none of the pipeline, the cluster or the object-store clients.
//
// # Shape
//
//	node: pipeline (per rank) --> delivery.Server (per rank: Unix socket)
//	   decoders write into           | descriptors, commits, epoch ends
//	   the rank's memfd              v
//	                               trainer (feed.Dial, or Python
//	                               longshore.Loader): maps the memfd
//	                               once; Batch.Images is a view of it
//
// The node's slots are one sealed memfd per rank stream, so a batch's
// pixels are already where the trainer can see them; the server sends
// only (region, offset, shape, labels, keys, epoch, step). Release
// messages give slots back, so the trainer's pace is the pipeline's
// back-pressure. The server is package delivery; in cluster mode the
// node's ranks are put behind it by node.ClusterFeed, whose decisions
// are cluster.RankDelivery's.
//
// # Concurrency and failure contract
//
// The Client's Next and Commit are for one goroutine; Batch.Release,
// State and Close are safe from any. In cluster mode Next returns a
// *RollbackError (errors.Is ErrRolledBack) naming the rank's last
// acknowledged commit when the rank rolled back: restore that checkpoint
// and call Next again. Errors the server reports arrive as *RemoteError
// with one of the Code constants.
//
// Linux only (memfd, SCM_RIGHTS).
package feed
