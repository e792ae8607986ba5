package wire

// The actors every process spawns under a fixed name on its protoactor
// remote endpoint, so that a peer reaches them from the address gossip
// advertises alone.
const (
	// NodeActor is the node agent's actor on every node's endpoint.
	NodeActor = "longshore-node"
	// CoordinatorActor is the coordinator's actor on its endpoint.
	CoordinatorActor = "longshore-coordinator"
)
