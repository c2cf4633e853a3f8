package grpclimit

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Missing says what a Limit does with a call its Key finds no key for (a
// Metadata limit and a call without that metadata, say). Its zero value is
// Refuse: a key function that finds nothing never means "unlimited" unless
// Skip says so.
type Missing struct {
	kind     missingKind
	fallback KeyFunc // for fallBack
}

type missingKind uint8

const (
	refuse missingKind = iota
	skip
	fallBack
)

// Refuse refuses a call Key finds no key for with INVALID_ARGUMENT naming
// the limit, counting nothing. It is the zero Missing, the default.
func Refuse() Missing { return Missing{} }

// Skip lets a call Key finds no key for through this limit: the limit does
// not apply to it. For limits meant for some calls only.
func Skip() Missing { return Missing{kind: skip} }

// FallBack counts a call Key finds no key for by k's key instead, such as
// PeerAddr for a call without an API key; the identities of the KeyFuncs of
// this package start with their kind, so the fallback's keys never share a
// count with Key's. A call k finds no key for either is refused, as with
// Refuse.
func FallBack(k KeyFunc) Missing { return Missing{kind: fallBack, fallback: k} }

// keyOf returns the key l counts the call against; "" when l does not
// apply (Skip), the INVALID_ARGUMENT status error when the call must be
// refused.
func (l *Limit) keyOf(ctx context.Context, fullMethod string) (string, error) {
	if key := l.Key(ctx, fullMethod); key != "" {
		return key, nil
	}
	switch l.Missing.kind {
	case skip:
		return "", nil
	case fallBack:
		if key := l.Missing.fallback(ctx, fullMethod); key != "" {
			return key, nil
		}
	}
	return "", status.Errorf(codes.InvalidArgument, "the call lacks what the limit %q counts it by", l.Limiter.Name())
}
