//go:build !linux

package benchmarks

import (
	"os/exec"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func startCmd(cmd *exec.Cmd) error { return cmd.Start() }
