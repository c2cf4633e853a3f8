package valkeystore

import "github.com/valkey-io/valkey-go"

// WithClientWrap makes Connect wrap the client it builds with wrap before
// the store uses it, such as in valkeyotel.WithClient for spans and metrics
// of its commands (sluiceotel's Observer.WrapValkey does, with the keys
// redacted). Every call of the store then goes through the wrapper, which
// must pass each call and its context to the client it wraps. It is an
// option of Connect only: New refuses it (wrap the client given to New
// yourself).
func WithClientWrap(wrap func(valkey.Client) valkey.Client) Option {
	return optionFunc(func(e *engine) { e.wrapClient = wrap })
}
