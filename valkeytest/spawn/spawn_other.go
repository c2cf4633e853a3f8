//go:build !linux

package spawn

import "os/exec"

// Start starts cmd. Outside Linux nothing ties its life to this process's:
// children of a process that dies without stopping them keep running.
func Start(cmd *exec.Cmd) error { return cmd.Start() }
