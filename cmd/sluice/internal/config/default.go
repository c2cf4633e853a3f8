package config

import _ "embed"

// defaultYAML is a copy of examples/sluice.yaml (a test keeps them equal):
// go:embed cannot reach outside the package directory.
//
//go:embed default.yaml
var defaultYAML []byte

// DefaultSource names the embedded default configuration in logs.
const DefaultSource = "embedded examples/sluice.yaml"

// Default returns the embedded example configuration, used when sluice serve
// is given no --config. The tests keep it valid.
func Default() (*Config, error) {
	return Parse(DefaultSource, defaultYAML)
}

// DefaultYAML returns the embedded example configuration's text.
func DefaultYAML() []byte { return append([]byte(nil), defaultYAML...) }
