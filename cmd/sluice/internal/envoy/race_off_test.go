//go:build !race

package envoy

// raceOn: see race_on_test.go.
const raceOn = false
