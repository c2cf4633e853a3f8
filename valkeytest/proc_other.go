//go:build !linux

package valkeytest

import "time"

func waitState(pid int, state byte) { time.Sleep(10 * time.Millisecond) }
