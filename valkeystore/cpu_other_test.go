//go:build !unix

package valkeystore_test

import "time"

// processCPU is zero where getrusage is missing: cpu-µs/op then reads 0.
func processCPU() time.Duration { return 0 }
