// Package actors is a node's data pipeline: per trainer rank, protoactor
// actors that turn a stream of work (sample keys in epoch order) into
// batches of decoded pixels in a fixed pool of slots, with back-pressure
// all the way from the trainer to the object store.
//
// # Data flow
//
//	          Want(n) / give(Work)           (credit: items it has room for)
//	 Source <------------------------> rank actor: scheduler + batcher
//	(Feeder, or the                    owns slots, fetch buffers, credits,
//	 cluster's lease                   the pure core (sched.go) that picks
//	 requester)                        |            ^
//	                  fetchMsg{buf}    |            | fetchedMsg{buf}
//	                                   v            |
//	                         fetcher x F (one Store.Get each, blocking;
//	                                      ranged: a Stat, docs/stages.md)
//	                  decodeMsg{buf, slot region}   ^ decodedMsg
//	                                   v            |
//	                         decoder x D (one SampleDecoder each; writes
//	                                      pixels straight into the slot)
//	                  uploadMsg{Batch} (complete batches, in order)
//	                                   v
//	                         [batch stage] (optional BatchStage: batch GPU
//	                                   |    decoding, batch augmentation)
//	                                   v
//	                         uploader (gpu.Uploader: HostUploader, a no-op;
//	                                   DeviceUploader, a copy to the slot's
//	                                   device buffer, Batch.Device)
//	                                   v readyMsg{Batch}
//	                         feed -> ready channel -> Next(ctx) -> trainer
//	                                                              |
//	       releaseMsg{slot} <------------------------ Batch.Release()
//
// Pixels never travel in messages: a decoder is given the sample's region of
// its batch's slot and writes there; messages carry buffer ids, slot
// numbers and *Batch views.
//
// # Batches are deterministic
//
// Batch k of an epoch is the rank's stream positions [k*B, (k+1)*B),
// whatever order fetches and decodes complete in. Samples that fail (fetch
// or decode) are left out and the rest compacted in order, so a batch's
// composition depends only on the work and on which samples are bad.
// Batches are delivered in (epoch, k) order; the last batch of an epoch is
// short, or dropped with DropLast. Pixel randomness (crops, flips) comes
// from SampleSeed(seed, epoch, index), never from which decoder ran.
//
// # Credits (back-pressure)
//
// Every send is made against a credit the receiver granted, and each
// actor's mailbox holds at most its credits, so no mailbox grows without
// bound (mailboxes are protoactor's unbounded ones; its Bounded mailbox
// spins the sender and is not used):
//
//   - Source: at most one Want outstanding, for at most Slots*B items minus
//     those pending; an answer may carry fewer.
//   - Fetchers: one read each (credit 1). A read needs a free fetch buffer:
//     the pool holds F + D*DecodeQueue buffers, reused (Store.Get appends
//     into them), so fetch memory is bounded by that many objects.
//   - Decoders: DecodeQueue tasks each (one decoding, the rest waiting).
//   - Slots: a sample is fetched only once its batch has a slot; batches
//     open in order; no free slot means nothing new is scheduled. The
//     uploader and feed hold at most Slots batches between them, and the
//     ready channel has room for all of them, so the feed never blocks.
//   - The trainer: a batch holds its slot until Release. A stalled trainer
//     stalls the whole pipeline with memory flat.
//
// Memory is therefore bounded by configuration: Slots*BatchSize*SampleBytes
// (allocated once, page-aligned, by package gpu) + (F + D*DecodeQueue) *
// the largest object + O(Slots*BatchSize) small work items.
//
// # Who owns what
//
//   - The rank actor owns the scheduler core, the fetch buffers (lending
//     one to a fetcher, then to a decoder, until the decode returns), the
//     slots' metadata, and every slot not lent out. Its core is a pure
//     state machine (events in, effects out) tested without actors.
//   - A decoder owns its SampleDecoder and, while decoding, one buffer and
//     one sample region of a slot.
//   - The uploader, then the feed, then the trainer own a full slot in turn;
//     Release returns it to the rank actor (and, first, its device buffer
//     to a gpu.SlotReleaser uploader). The pipeline closes the uploader
//     when it frees the slots: after the last batch is released.
//   - Stats and the failure book are shared by mutex (a few uncontended
//     locks per sample); a Node's ranks share one failure book, so the
//     failure budget is the node's.
//
// # Failures
//
// A failed sample is recorded (key, stage, class, reason) in the failure
// book and left out of its batch. When failures exceed MaxFailures (a count,
// or a fraction of the run's samples), the run stops: nothing more is
// scheduled, and Next returns a *BudgetError (errors.Is ErrFailureBudget)
// with the report grouped by stage and class, after the batches already
// completed. A Source error, an upload error or a panic in an actor also
// ends the run with an error from Next; nothing is only logged. A decoder
// panic on hostile input is a per-sample failure (class "panic").
//
// # Concurrency contract
//
// Next, Stats, Failures, Close and Shutdown are safe for concurrent use;
// Batch.Release may be called from any goroutine, once or more. A Batch's
// slices are valid until Release (even after Close: slot memory is freed
// when the last batch is released). Shutdown cancels reads, waits for
// every actor (a decode in progress finishes) and every goroutine the
// pipeline started, and returns ctx.Err() if ctx ends first. A Source's
// Want is called from the rank actor and must not block.
//
// # Standalone mode
//
// NewLoader is one rank over a dataset; NewNode runs R ranks that split
// each epoch the way PyTorch's DistributedSampler does (rank r takes
// positions r, r+R, ...; padded with repeats so all ranks take the same
// number of steps). Node.Run drains every rank concurrently into a
// callback; Node.Stats merges the ranks' stats; Stats.Bottleneck names the
// limiting stage. The FFmpeg decoder plugs in through package
// actors/ffdecode, which keeps actors itself free of cgo.
package actors
