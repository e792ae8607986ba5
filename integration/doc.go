// Package integration tests longshore from the outside, as its users run
// it. Its tests hold all of its code; this file only documents them.
//
// Without build tags (in make test) they run the real binaries as OS
// processes on loopback: a coordinator and nodes on 127.0.0.x, joined by
// gossip, talking over protoactor remote, reading a local directory or a
// MinIO bucket, and check the promise from the delivery logs of the nodes
// and the coordinator's ack log — exactly once per epoch in committed
// history, equal steps, exact resume, and the same pixels for a sample
// whichever node, session or restart served it.
//
// With the integration tag (make integ) they run the docker-compose
// deployment (integration/docker-compose.yml, images built FROM scratch by
// make images) and its chaos tests: kill a node or the coordinator,
// partition a node, restart MinIO or everything, join mid-epoch.
package integration
