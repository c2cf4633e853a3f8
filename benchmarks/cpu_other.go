//go:build !unix

package benchmarks

import "time"

// ProcessCPU is zero where getrusage is missing: CPU columns then read 0.
func ProcessCPU() time.Duration { return 0 }
