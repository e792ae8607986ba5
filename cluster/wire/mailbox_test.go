package wire

import (
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
)

// TestReadyMailboxRespawn spawns an actor again and again under one name
// while another goroutine keeps sending to that name, as a restarted
// coordinator's nodes do, and checks the live actor still gets the
// messages. It does not reproduce the race itself: the window is a few
// instructions wide, and three -race runs with protoactor's default
// mailbox here did not hit it; TestReadyMailboxWaitsForHandlers posts
// before or during registration).
func TestReadyMailboxRespawn(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	var got atomic.Int64
	props := actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(int); ok {
			got.Add(1)
		}
	}, actor.WithMailbox(ReadyMailbox()))
	const name = "respawned"
	target := actor.NewPID(sys.Address(), name)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				sys.Root.Send(target, 1)
			}
		}
	}()
	for range 200 {
		pid, err := sys.Root.SpawnNamed(props, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := sys.Root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
	}
	pid, err := sys.Root.SpawnNamed(props, name)
	if err != nil {
		t.Fatal(err)
	}
	before := got.Load()
	for got.Load() == before { // the sender's messages reach the live actor
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()
	_ = sys.Root.StopFuture(pid).Wait()
}

type syncDispatcher struct{}

func (syncDispatcher) Schedule(fn func()) { go fn() }
func (syncDispatcher) Throughput() int    { return 10 }

type recorder struct{ got chan interface{} }

func (r recorder) InvokeSystemMessage(interface{})          {}
func (r recorder) InvokeUserMessage(m interface{})          { r.got <- m }
func (r recorder) EscalateFailure(interface{}, interface{}) {}

// TestReadyMailboxWaitsForHandlers: a post that comes before the
// handlers (protoactor's default mailbox would call a nil dispatcher)
// waits for them and is delivered.
func TestReadyMailboxWaitsForHandlers(t *testing.T) {
	mb := ReadyMailbox()()
	posted := make(chan struct{})
	go func() { mb.PostUserMessage("early"); close(posted) }()
	rec := recorder{got: make(chan interface{}, 1)}
	mb.RegisterHandlers(rec, syncDispatcher{})
	mb.Start()
	<-posted
	if m := <-rec.got; m != "early" {
		t.Fatalf("delivered %v, want the early post", m)
	}
}
