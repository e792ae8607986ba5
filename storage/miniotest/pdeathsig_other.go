//go:build !linux

package miniotest

import "os/exec"

func setParentDeathSignal(*exec.Cmd) {}
