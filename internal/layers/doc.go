// Package layers holds one test, TestLayers, that states which package of
// the repository may import which (in the manner of tailscale's
// tstest/deptest): the layers of the tree, and which packages may reach
// the network, the file system, the object-store client (minio-go),
// FFmpeg (go-astiav), CUDA (gorgonia.org/cu) and the actor system
// (protoactor-go). A new package, or a new import that crosses a layer,
// fails it until the rules below say so. It asks the go command, so it
// sees exactly what a build links; it has no code of its own.
package layers
