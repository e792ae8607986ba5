package wire

import "github.com/asynkron/protoactor-go/actor"

// ReadyMailbox is protoactor's default (unbounded) mailbox made safe to
// post to while its actor is being spawned.
//
// protoactor's spawn adds the process to the registry, where a send by
// name finds it, before it gives the mailbox its dispatcher
// (RegisterHandlers): a message that arrives in between reads the
// dispatcher unsynchronized, a data race that can also find it nil. It
// happens to a named actor that is spawned again under a name senders
// already hold, as a restarted coordinator is (its nodes keep sending to
// "coordinator"; the race detector caught it in
// TestClusterFeedCoordinatorRestart). A post to this mailbox waits until
// its handlers are registered, microseconds after the registry entry.
func ReadyMailbox() actor.MailboxProducer {
	inner := actor.Unbounded()
	return func() actor.Mailbox { return &readyMailbox{Mailbox: inner(), ready: make(chan struct{})} }
}

type readyMailbox struct {
	actor.Mailbox
	ready chan struct{}
}

func (m *readyMailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.Mailbox.RegisterHandlers(invoker, dispatcher)
	close(m.ready)
}

func (m *readyMailbox) PostUserMessage(message interface{}) {
	<-m.ready
	m.Mailbox.PostUserMessage(message)
}

func (m *readyMailbox) PostSystemMessage(message interface{}) {
	<-m.ready
	m.Mailbox.PostSystemMessage(message)
}
