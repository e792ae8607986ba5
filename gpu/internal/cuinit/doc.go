// Package cuinit initializes the CUDA driver before gorgonia.org/cu does,
// to say clearly why it cannot start. cu's own init calls cuInit and, on
// failure, prints a terse line and exits; Go initializes packages in
// import-path order among those ready (the spec, since Go 1.21), and this
// package's path sorts before gorgonia.org/cu and it imports nothing of
// cu's, so it runs first. On failure it exits with a message that says
// what to do: a `cuda` build is for hosts with an NVIDIA driver and a
// visible device; build without the tag for the others. A lone
// --version is answered first, without CUDA (internal/buildversion,
// which it imports and so is initialized before it).
//
// In a build without the cuda tag it is empty.
package cuinit
