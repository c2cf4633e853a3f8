package config

import "fmt"

// ParseKeySource parses a forward_auth key source as a configuration spells
// it: client_ip, header:NAME or claim:NAME.
func ParseKeySource(s string) (KeySource, error) {
	src, ok := parseKeySource(s)
	if !ok {
		return KeySource{}, fmt.Errorf("key source %q must be client_ip, header:NAME or claim:NAME", s)
	}
	return src, nil
}
