//go:build !linux

package valkeytest

import (
	"os/exec"
	"syscall"
	"time"
)

// sysProcAttr has nothing to add outside Linux: servers of a test binary
// that dies without running Main are left running.
func sysProcAttr() *syscall.SysProcAttr { return nil }

func startCmd(cmd *exec.Cmd) error { return cmd.Start() }

func waitState(pid int, state byte) { time.Sleep(10 * time.Millisecond) }
