// Package cluster is the pure core of longshore's cluster: the epoch
// order, shards and leases, and the coordinator's state machine. It does
// no I/O, starts no goroutines, reads no clock and draws no randomness
// except from the job's seed (TestDeps enforces the imports). The shells —
// gossip membership (memberlist), the coordinator actor and the node's
// lease requester (protoactor remote) — live in other packages, feed this
// one events and carry out what it decides.
//
// # Epoch order
//
// Epoch e of an N-sample manifest is the permutation NewOrder(seed, e, N,
// block, window): fixed by (seed, e) alone, never by the number of nodes
// or ranks, so a run is reproducible across cluster sizes and a resume
// with a different world size continues the same sequence. It is computed
// on demand in O(1) memory (keyed Feistel bijections), blocks first and
// then within blocks, as Mosaic Streaming does, so locality can be kept;
// then the positions of each window of Window consecutive blocks are
// shuffled together, so a batch mixes many blocks (a manifest sorted by
// class would otherwise give one-class batches) while a window's samples
// are still read together.
//
// # Positions, shards, leases, streams
//
// The coordinator deals in positions of the epoch order, never in sample
// indices: the node maps a position to a sample with Order.Sample. A shard
// is the run [k*ShardSize, (k+1)*ShardSize) of positions (with windows,
// the same runs from each window's start, never crossing a window;
// without, when Block > 1 divides ShardSize, the same grid laid over the
// order's blocks, around the short block: a shard never splits a block);
// a Lease grants a
// run of positions inside one shard to one rank, named by a Fence. A rank
// delivers its leases of an epoch in Index order, each in position order:
// that concatenation is the rank's epoch stream, cut by its trainer into
// batches. Positions >= N are padding (Lease.Pad): the rank delivers a
// repeat, marked as padding, trained on but never counted.
//
// Progress arrives as watermarks (Progress), finished or shortened leases
// as LeaseDone. A lease is split by a Revoke: the rank answers LeaseDone
// with where it actually stopped, and the tail returns to the pool.
//
// # Commits and the promise
//
// A trainer commits a step (Commit): "my model includes every batch of my
// epoch stream through here". A commit is durable once the shell has
// persisted Snapshot after the Step that accepted it (Ready.Persist), and
// only then acknowledged (Ready.Acks). Committed history is the set of
// accepted commits. The promise: for every epoch, the real positions in
// committed history are each position exactly once (less what
// DropRemainder drops). When a node fails or leaves (Fail, Leave) or a new
// life of it joins, its ranks' sessions are fenced: nothing they send is
// accepted again (ErrFenced), and every position they held but had not
// committed returns to the pool to be leased again — so samples delivered
// after a rank's last commit are re-delivered after its node dies.
//
// The committed state is O(leases) and usually O(ranks) per open epoch:
// per epoch, the committed positions as merged ranges (State). It does
// not grow with the number of samples.
//
// # Equal steps
//
// With EqualSteps (the default), every rank that is a member of an epoch
// ends it with the same stream length, so the same number of batches: a
// data-parallel rank that ran out early would hang the others in their
// collective ops. The quota is ceil(N/W) positions per rank, padded with
// repeats (PyTorch's DistributedSampler without drop_last), or floor(N/W)
// with DropRemainder, which drops the tail of the order. Ranks still pull
// (a faster loader fetches further ahead), but no rank is leased beyond
// its quota, and leases are never split in this mode. When membership
// changes mid-epoch the quota is re-planned over the members left; ranks
// then still end with equal lengths where their leases allow, but equal
// batch counts are promised only while membership is stable. A rank that
// joins an epoch after all its work was leased starts with the next one.
//
// With Dynamic, ranks take what they ask for and an idle rank gets half
// of the undelivered tail of the rank holding the most (a straggler's
// lease is split): for consumers that do not synchronize.
//
// # Driving the Coordinator
//
// One goroutine owns a Coordinator. For every event: Step(ev); then, if
// HasReady, take Ready, persist if it says so, send what it lists, and
// call Advance — etcd raft's Ready loop. Ticks are abstract: the shell
// decides how long one is (RevokeTimeout counts them). Every message a
// rank sends carries its Session; leases carry their Fence; a restarted
// coordinator (Restore) has a larger Incarnation, so everything the old
// one issued is fenced.
//
// # The node's side
//
// RankLeases is the rank's half of the protocol, pure in the same way: it
// takes grants for an epoch in Index order (they may arrive reordered),
// answers a Revoke with LeaseDone (applying one that overtook its grant
// when the grant arrives), treats StreamEnd as "your stream is complete at
// Length, once you hold Leases leases", and turns a trainer's commit
// (a stream offset) into a Commit naming its lease and position. On
// Eviction the node drops its RankLeases, rolls its trainers back to the
// last acknowledged commit and rejoins with a larger incarnation; on a
// Welcome from a new coordinator life it does the same without rejoining.
//
// # Links
//
// The shells carry these messages over a transport that may drop them
// (protoactor remote delivers at most once). Link makes the channel
// between a coordinator life and a node life reliable: numbered frames,
// cumulative acknowledgements, resends on the shell's clock; every
// message is applied once, in order. A new life of either end starts a
// new link. NewerCoordinator says which coordinator life a node follows;
// a coordinator without a journal has a NoJournal incarnation.
//
// The simulation (sim_test.go) runs this Coordinator against RankLeases
// nodes through a network that delays, reorders, duplicates and (through
// links) loses messages and cuts connections, with crashes, false failure
// reports, joins and coordinator restarts, and checks the promise, and
// liveness within a bound after the last fault, for thousands of seeds.
package cluster
