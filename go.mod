module github.com/sluicehq/sluice

go 1.26.0

require (
	github.com/valkey-io/valkey-go v1.0.79
	golang.org/x/text v0.42.0
)

require (
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
