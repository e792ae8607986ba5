// Package journal keeps the coordinator's durable state (cluster.State)
// in an object store — the --checkpoint location, a directory or
// s3://bucket/jobs/<job> — and turns it into resume tokens and back. It
// is a shell: the coordinator actor (cluster/coord) calls Write after
// every Ready that says Persist and before it sends the Ready's acks;
// the binary (cmd/coordinator) calls Open and Start once, at start.
//
// # Layout
//
// One object per generation, never overwritten:
//
//	<root>/gen/00000000000000000042
//
// and, once an epoch has completed, a copy of what each of its rank
// sessions committed (cluster.Trail), for lineage (archive.go):
//
//	<root>/lineage/<job id>/epoch-0000000003
//
// The generation number is 20 zero-padded digits, so a listing (lexical
// on every store) is in generation order. A coordinator writes generation
// g+1 with a conditional put, If-None-Match: * (storage.Cond{IfAbsent:
// true}): of two coordinators that both believe g is the newest, exactly
// one creates g+1; the other gets storage.ErrPrecondition, and Write
// returns ErrSuperseded — the loser steps down before it acknowledges
// anything. There is no head pointer to keep in step with the objects:
// the newest generation is the largest key, and a generation number is
// used at most once, so it doubles as the coordinator's incarnation (a
// coordinator's fences carry the first generation it writes; see Start).
//
// A put whose answer is lost (it landed but reported failure) is retried;
// the retry finds the key taken, reads it back, and counts it as written
// if the bytes are its own.
//
// # Encoding
//
// A generation is a small binary object: a magic and version, the job id
// (random, chosen when the journal is created; tokens carry it), the
// generation, the writer's incarnation, the write time, the job's shape
// (samples, seed, block, window; versions before 3 have no window and
// read as window 1, the order before windows), the rest of the job's
// identity (dataset digest, batch size, epochs; versions before 4 have
// none: see Identity), then per started epoch
// its flags and its committed and dropped positions as delta-encoded
// varint ranges — O(open
// ranges), which is O(ranks) per open epoch in practice and never
// O(samples) — its ranks' last commits and (version 5) its trails: per
// rank session its leases through its last commit, its stream ends,
// the commits the others do not imply and (version 6) where its node
// cut its runs (O(leases) per open epoch), then
// the gossip addresses of the members the coordinator
// knew (so a restarted coordinator can rejoin them), and a CRC-32C of
// everything before it. A truncated, torn or altered object fails the
// checksum (ErrCorrupt). A corrupt newest generation stops Start with
// the object and the cause: falling back would acknowledge again the
// commits it held. StartOptions.Fallback (--journal-fallback) falls back
// to the previous good generation and says so in the log. If no
// generation is readable, Start fails: a journal that exists is never
// silently replaced by a fresh job.
//
// # Identity
//
// The coordinator calls Identify after Start with the job's Identity —
// dataset digest and the parameters that fix the order and the steps —
// which is checked against the generation continued from (a difference
// is ErrMismatch, naming each; --force-resume accepts those the order
// survives) and recorded in every later generation and token.
//
// # History and tokens
//
// The last Config.Keep generations are kept (older ones are deleted after
// each write, best effort). A resume token (Token) names the job, the
// generation that made an acknowledged commit durable, the commit's
// epoch and step, and (version 2, lsr2.) the job's identity, so a node
// refuses another job's token when a trainer presents it; restoring it restores that generation's committed
// state — older than the newest is allowed while it is kept — so the data
// cursor matches the model the trainer saved beside the token. A token
// whose generation was pruned fails with ErrPruned, never with a guess.
//
// # Concurrency
//
// A Journal is owned by one goroutine (the coordinator actor); it is not
// safe for concurrent use. Every method that does I/O takes a context and
// may block on the store.
package journal
