// Command go_train is examples/pytorch_train.py's shape in Go: a trainer
// fed by a longshore node through the feed (feed's Go client),
// checkpointing every --commit-every steps with the loader's position
// beside the model, and resuming from it with --resume.
//
// The "model" is a softmax regression over 4×4-pooled channel means (48
// features): small enough to train on a CPU between batches, real enough
// that its loss goes down. The point is the loop around it.
//
//	go run ./examples/feed_server --dataset "$(scripts/dataset.sh 512)" --dir /tmp/lsfeed &
//	go run ./examples/go_train --socket /tmp/lsfeed/rank-0.sock --steps 20 --ckpt /tmp/gockpt
//	go run ./examples/go_train --socket /tmp/lsfeed/rank-0.sock --steps 40 --ckpt /tmp/gockpt --resume
//
// Without --socket it serves rank $LOCAL_RANK (as torchrun sets it) from
// feed.DefaultDir(), like the Python client.
//
// Checkpoint order, as in the Python example: Commit at the node, write
// loader-rank<R>-step<S>.json, then model.json naming step S. A crash at
// any point leaves the previous model.json and its loader file intact.
//
// Cluster mode (a node started with --join ... --sink feed): Commit
// blocks until the coordinator acknowledges it and returns its journal
// token. When the coordinator restarts or the node is evicted, Next
// returns a *feed.RollbackError (errors.Is feed.ErrRolledBack) naming the
// rank's last acknowledged commit: go_train restores the checkpoint saved
// with it (model.json, whose loader file must hold the same token; none
// committed: the model this run started with) and reads on; the next
// batches continue right after that commit. A Commit refused because its
// batch's era ended saves nothing; the next Next reports the rollback. It
// also commits each epoch's last batch (Batch.EndOfStream): the cluster
// completes an epoch only when every rank has.
//
// --record FILE appends what the trainer did as JSON lines (batches with
// their sample keys, acks, rollbacks), for tests that check the promise
// from the outside (integration/feed_restart_test.go).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/longshore/longshore/feed"
)

// options are the command line.
type options struct {
	Socket      string
	Ckpt        string
	Steps       int     // train until this many steps in all (resumed ones included)
	CommitEvery int     // checkpoint every N steps; 0: only at the end
	Resume      bool    // continue from the newest checkpoint in Ckpt
	Classes     int     // output classes
	LR          float64 // SGD learning rate
	Record      string  // append events as JSON lines here ("": no record)
}

func main() {
	var o options
	flag.StringVar(&o.Socket, "socket", "", "feed socket (default: rank $LOCAL_RANK in $LONGSHORE_FEED_DIR or the node's default dir)")
	flag.StringVar(&o.Ckpt, "ckpt", "checkpoints-go", "checkpoint directory")
	flag.IntVar(&o.Steps, "steps", 40, "train until this many steps in all")
	flag.IntVar(&o.CommitEvery, "commit-every", 10, "checkpoint and commit every N steps")
	flag.BoolVar(&o.Resume, "resume", false, "continue from the newest checkpoint in --ckpt")
	flag.IntVar(&o.Classes, "num-classes", 1000, "output classes")
	flag.Float64Var(&o.LR, "lr", 0.5, "learning rate")
	flag.StringVar(&o.Record, "record", "", "append what the trainer did (batches, acks, rollbacks) as JSON lines to this file")
	flag.Parse()
	rank, _ := strconv.Atoi(os.Getenv("LOCAL_RANK"))
	if o.Socket == "" {
		o.Socket = filepath.Join(feed.DefaultDir(), feed.SocketName(rank))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := run(ctx, o, rank, os.Stdout); err != nil {
		log.Fatalf("go_train: %v", err)
	}
}

// model is a softmax regression: W is classes × features, row-major.
type model struct {
	Classes  int       `json:"classes"`
	Features int       `json:"features"`
	W        []float64 `json:"w"`
	B        []float64 `json:"b"`
}

const grid = 4 // features: channel means over a grid×grid tiling

func newModel(classes, channels int) *model {
	f := channels * grid * grid
	return &model{Classes: classes, Features: f, W: make([]float64, classes*f), B: make([]float64, classes)}
}

// clone returns a deep copy.
func (m *model) clone() *model {
	c := *m
	c.W, c.B = append([]float64(nil), m.W...), append([]float64(nil), m.B...)
	return &c
}

// features pools sample i of a uint8 batch into m.Features values in [0, 1].
func features(b *feed.Batch, i int, dst []float64) {
	d1, d2, d3 := b.Dims[1], b.Dims[2], b.Dims[3]
	c, h, w := d1, d2, d3
	if b.Layout == "NHWC" {
		h, w, c = d1, d2, d3
	}
	sample := b.Images[i*c*h*w : (i+1)*c*h*w]
	clear(dst)
	for y := 0; y < h; y++ {
		gy := y * grid / h
		for x := 0; x < w; x++ {
			gx := x * grid / w
			for ch := 0; ch < c; ch++ {
				var v byte
				if b.Layout == "NHWC" {
					v = sample[(y*w+x)*c+ch]
				} else {
					v = sample[(ch*h+y)*w+x]
				}
				dst[(ch*grid+gy)*grid+gx] += float64(v)
			}
		}
	}
	cell := float64(h*w) / (grid * grid) * 255
	for k := range dst {
		dst[k] /= cell
	}
}

// step runs one SGD step on the batch and returns its mean cross-entropy.
func (m *model) step(b *feed.Batch, lr float64) float64 {
	n := len(b.Labels)
	if n == 0 {
		return 0
	}
	gW := make([]float64, len(m.W))
	gB := make([]float64, len(m.B))
	x := make([]float64, m.Features)
	p := make([]float64, m.Classes)
	loss := 0.0
	for i := 0; i < n; i++ {
		features(b, i, x)
		mx := math.Inf(-1)
		for k := 0; k < m.Classes; k++ {
			s := m.B[k]
			for j, v := range x {
				s += m.W[k*m.Features+j] * v
			}
			p[k] = s
			mx = max(mx, s)
		}
		sum := 0.0
		for k := range p {
			p[k] = math.Exp(p[k] - mx)
			sum += p[k]
		}
		y := int(b.Labels[i])
		if y < 0 || y >= m.Classes {
			continue
		}
		loss -= math.Log(p[y] / sum)
		for k := range p {
			g := p[k] / sum
			if k == y {
				g--
			}
			gB[k] += g
			for j, v := range x {
				gW[k*m.Features+j] += g * v
			}
		}
	}
	s := lr / float64(n)
	for k := range m.W {
		m.W[k] -= s * gW[k]
	}
	for k := range m.B {
		m.B[k] -= s * gB[k]
	}
	return loss / float64(n)
}

// checkpoint is model.json.
type checkpoint struct {
	Step  int    `json:"step"`
	Model *model `json:"model"`
}

// loaderState is loader-rank<R>-step<S>.json: where the feed resumes.
type loaderState struct {
	Token []byte `json:"token"`
	Epoch int    `json:"epoch"`
	Step  int64  `json:"step"`
}

func loaderPath(dir string, rank, step int) string {
	return filepath.Join(dir, fmt.Sprintf("loader-rank%d-step%d.json", rank, step))
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// result is what a run did, for tests.
type result struct {
	Steps        int          // steps in all at the end
	First        *feed.Cursor // first batch this run trained on (nil: none)
	ResumedStep  int          // the checkpoint's step (0: fresh start)
	LastCommit   feed.Cursor  // (epoch, step) of the last commit
	Checkpointed int          // checkpoints written
	Rollbacks    int          // rollbacks restored (cluster mode)
}

// event is one line of --record.
type event struct {
	Ev        string   `json:"ev"` // batch, ack, commit_rolled_back, rollback, end
	Epoch     int      `json:"epoch"`
	Step      int64    `json:"step"`
	Keys      []string `json:"keys,omitempty"`  // batch: its real samples (pads left out)
	EOS       bool     `json:"eos,omitempty"`   // batch: end of the rank's stream for the epoch
	Token     string   `json:"token,omitempty"` // ack, rollback
	Committed bool     `json:"committed"`       // rollback: it names a commit
}

// restore rolls m back to the checkpoint of rb: model.json, whose loader
// file must hold the commit rb names; when rb names none, initial (the
// model this run started with, at step initialStep).
func restore(o options, rank int, rb *feed.RollbackError, initial *model, initialStep int) (*model, int, error) {
	if !rb.Committed {
		return initial.clone(), initialStep, nil
	}
	var ck checkpoint
	if err := readJSON(filepath.Join(o.Ckpt, "model.json"), &ck); err != nil {
		return nil, 0, fmt.Errorf("rollback to epoch %d step %d: %w", rb.Epoch, rb.Step, err)
	}
	var ls loaderState
	if err := readJSON(loaderPath(o.Ckpt, rank, ck.Step), &ls); err != nil {
		return nil, 0, fmt.Errorf("rollback to epoch %d step %d: %w", rb.Epoch, rb.Step, err)
	}
	if string(ls.Token) != string(rb.Token) {
		return nil, 0, fmt.Errorf("rollback to epoch %d step %d (token %s), but the newest checkpoint (step %d) holds epoch %d step %d (token %s): restart the job from a checkpoint",
			rb.Epoch, rb.Step, rb.Token, ck.Step, ls.Epoch, ls.Step, ls.Token)
	}
	return ck.Model, ck.Step, nil
}

func run(ctx context.Context, o options, rank int, out io.Writer) (result, error) {
	var res result
	if err := os.MkdirAll(o.Ckpt, 0o755); err != nil {
		return res, err
	}
	var (
		m    *model
		step int
		dc   feed.DialConfig
	)
	if o.Resume {
		var ck checkpoint
		err := readJSON(filepath.Join(o.Ckpt, "model.json"), &ck)
		switch {
		case errors.Is(err, os.ErrNotExist):
			fmt.Fprintf(out, "rank %d: no checkpoint in %s: starting fresh\n", rank, o.Ckpt)
		case err != nil:
			return res, fmt.Errorf("read checkpoint: %w", err)
		default:
			var ls loaderState
			if err := readJSON(loaderPath(o.Ckpt, rank, ck.Step), &ls); err != nil {
				return res, fmt.Errorf("checkpoint at step %d has no loader state for rank %d: %w", ck.Step, rank, err)
			}
			m, step, dc.Token = ck.Model, ck.Step, ls.Token
			res.ResumedStep = step
			fmt.Fprintf(out, "rank %d: resumed at step %d (loader after epoch %d step %d)\n", rank, step, ls.Epoch, ls.Step)
		}
	}
	record := func(event) {}
	if o.Record != "" {
		f, err := os.OpenFile(o.Record, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return res, err
		}
		defer f.Close()
		enc := json.NewEncoder(f)
		record = func(e event) { enc.Encode(e) }
	}
	c, err := feed.DialContext(ctx, o.Socket, dc)
	if err != nil {
		return res, err
	}
	defer c.Close()
	w := c.Welcome()
	if m == nil {
		m = newModel(o.Classes, w.Sample.Channels)
	}
	initial, initialStep := m.clone(), step // what a rollback before any acknowledged commit restores
	fmt.Fprintf(out, "rank %d: feed %s: batch %d, sample %+v, %s, resume at %+v\n", rank, o.Socket, w.BatchSize, w.Sample, w.Layout, w.Resume)

	saved := step // the step of the last checkpoint
	save := func(epoch int, bstep int64) error {
		tok, err := c.Commit(ctx, epoch, bstep)
		if errors.Is(err, feed.ErrRolledBack) {
			// The batch's era ended: nothing is saved; Next reports the rollback.
			fmt.Fprintf(out, "rank %d: checkpoint at step %d rolled back\n", rank, step)
			record(event{Ev: "commit_rolled_back", Epoch: epoch, Step: bstep})
			return nil
		}
		if err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		cs := c.State() // the commit the node acknowledged
		record(event{Ev: "ack", Epoch: cs.CommittedEpoch, Step: cs.CommittedStep, Token: string(tok)})
		if err := writeJSON(loaderPath(o.Ckpt, rank, step), loaderState{Token: tok, Epoch: epoch, Step: bstep}); err != nil {
			return err
		}
		if err := writeJSON(filepath.Join(o.Ckpt, "model.json"), checkpoint{Step: step, Model: m}); err != nil {
			return err
		}
		old, _ := filepath.Glob(filepath.Join(o.Ckpt, fmt.Sprintf("loader-rank%d-step*.json", rank)))
		for _, f := range old {
			if f != loaderPath(o.Ckpt, rank, step) {
				os.Remove(f)
			}
		}
		res.LastCommit, res.Checkpointed, saved = feed.Cursor{Epoch: epoch, Step: bstep}, res.Checkpointed+1, step
		fmt.Fprintf(out, "rank %d: checkpoint at step %d\n", rank, step)
		return nil
	}

	t0, seen := time.Now(), 0
	var last *feed.Cursor
	for step < o.Steps { // check before taking a batch: a taken batch is trained before any commit
		b, err := c.Next(ctx)
		var rb *feed.RollbackError
		if errors.As(err, &rb) {
			record(event{Ev: "rollback", Epoch: rb.Epoch, Step: rb.Step, Token: string(rb.Token), Committed: rb.Committed})
			if m, step, err = restore(o, rank, rb, initial, initialStep); err != nil {
				return res, err
			}
			saved, last = step, nil
			res.Rollbacks++
			fmt.Fprintf(out, "rank %d: rolled back to epoch %d batch %d: restored the checkpoint at step %d\n", rank, rb.Epoch, rb.Step, step)
			continue
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return res, err
		}
		loss := m.step(b, o.LR)
		cur := feed.Cursor{Epoch: b.Epoch, Step: b.Step}
		n, eos := len(b.Labels), b.EndOfStream
		if o.Record != "" {
			var keys []string
			for i, k := range b.Keys {
				if i >= len(b.Pads) || !b.Pads[i] {
					keys = append(keys, k)
				}
			}
			record(event{Ev: "batch", Epoch: b.Epoch, Step: b.Step, Keys: keys, EOS: eos})
		}
		b.Release()
		if res.First == nil {
			res.First = &cur
		}
		last = &cur
		step++
		seen += n
		fmt.Fprintf(out, "rank %d: step %d (epoch %d batch %d) loss %.4f %.0f img/s\n", rank, step, cur.Epoch, cur.Step, loss,
			float64(seen)/time.Since(t0).Seconds())
		if o.CommitEvery > 0 && step%o.CommitEvery == 0 || eos {
			if err := save(cur.Epoch, cur.Step); err != nil {
				return res, err
			}
		}
	}
	if last != nil && saved != step {
		if err := save(last.Epoch, last.Step); err != nil {
			return res, err
		}
	}
	record(event{Ev: "end", Step: int64(step)})
	res.Steps = step
	return res, nil
}
