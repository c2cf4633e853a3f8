module github.com/sluicehq/sluice/compat/envoy

go 1.26.0
