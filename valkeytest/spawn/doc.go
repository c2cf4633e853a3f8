// Package spawn starts the servers that tests and benchmarks run
// (valkey-server and the like) so that they die with the process that
// started them: a test binary that crashes, times out or is interrupted
// leaves none behind.
package spawn
