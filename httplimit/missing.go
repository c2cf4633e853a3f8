package httplimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Missing says what a Limit does with a request its Key finds no key for
// (a Header limit and a request without the header, say). Its zero value
// is Refuse: a key function that finds nothing never means "unlimited"
// unless Skip says so.
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

// Refuse refuses a request Key finds no key for: the Middleware answers it
// with Config.ErrorHandler and a *NoKeyError (by default 400 Bad Request
// with an application/problem+json body naming the limit), and nothing is
// counted. It is the zero Missing, the default.
func Refuse() Missing { return Missing{} }

// Skip lets a request Key finds no key for through this limit: the limit
// does not apply to it (it is neither checked nor advertised). For limits
// meant for some requests only, such as an anonymous-only limit, which a
// request with an API key skips.
func Skip() Missing { return Missing{kind: skip} }

// FallBack counts a request Key finds no key for by k's key instead, such
// as the client address (ClientAddr) for a request without an API key; the
// identities of the KeyFuncs of this package start with their kind, so the
// fallback's keys never share a count with Key's. A request k finds no key
// for either is refused, as with Refuse.
func FallBack(k KeyFunc) Missing { return Missing{kind: fallBack, fallback: k} }

// ErrNoKey is what a *NoKeyError matches with errors.Is.
var ErrNoKey = errors.New("httplimit: no key for the request")

// A NoKeyError is the error for a request that a limit's Key (and its
// FallBack, if any) finds no key for, when its Missing is Refuse.
type NoKeyError struct {
	Limit string // the limit's policy name
}

func (e *NoKeyError) Error() string {
	return fmt.Sprintf("httplimit: no key for limit %q (see Limit.Missing)", e.Limit)
}

// Is makes errors.Is(err, ErrNoKey) hold.
func (e *NoKeyError) Is(target error) bool { return target == ErrNoKey }

// keyOf returns the key l counts r against; "" when l does not apply
// (Skip), a *NoKeyError when r must be refused.
func (l *limit) keyOf(r *http.Request) (string, error) {
	if key := l.Key(r); key != "" {
		return key, nil
	}
	switch l.Missing.kind {
	case skip:
		return "", nil
	case fallBack:
		if key := l.Missing.fallback(r); key != "" {
			return key, nil
		}
	}
	return "", &NoKeyError{Limit: l.name}
}

// writeNoKey answers a request refused for want of a key: 400 with an
// application/problem+json body naming the limit.
func writeNoKey(w http.ResponseWriter, e *NoKeyError) {
	body, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", "Bad Request", http.StatusBadRequest,
		"The request lacks what the limit " + strconv.Quote(e.Limit) + " counts it by."})
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusBadRequest)
	w.Write(body)
}
