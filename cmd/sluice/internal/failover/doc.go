// Package failover holds no code: its test, built with the tag failover,
// runs library traffic and sluice serve's readiness check through the
// failures of a Valkey Cluster (see failover_test.go).
package failover
