// Package login protects sign-in (and password reset, one-time code)
// endpoints against password guessing, with two limits checked together on
// every attempt:
//
//   - per username, which catches a distributed attack on one account even
//     when each address tries only once;
//   - per client address, which catches one address trying many accounts
//     (credential stuffing, password spraying).
//
// Call Guard.Attempt (or Guard.AttemptRequest) before checking the
// password, with the username as typed and the client's parsed address, and
// stop when it refuses. Call Guard.Success after a correct password to clear the
// username's count, so that a user who mistypes a few times and then gets
// in starts afresh.
//
// The guard never looks the account up, so its answers are the same whether
// or not the account exists, and limits cannot be used to find out which
// accounts exist. Keep the rest of the handler equally uninformative: answer
// "wrong username or password" for both cases, and spend the same time on
// both (verify against a dummy hash when there is no account).
//
// Addresses are counted as package clientip groups them: an IPv4 address
// alone, an IPv6 address with its /64 (Config.ClientIP), so a client cannot
// take a fresh budget with a fresh port or a fresh address of its own
// prefix.
//
// Usernames are normalised (see Normalize) and hashed with HMAC-SHA256
// under a secret before they become keys, so e-mail addresses never reach
// the store in clear, and whoever can read the store cannot test guesses of
// usernames against the keys without the secret.
//
// The guard fails closed by default: when the store is unavailable, logins
// are refused (Verdict.Degraded is set), since an unlimited window is what
// an attacker waits for. Set Config.FailOpen to prefer availability.
//
// A per-username limit lets anyone lock an account out for a window by
// failing on purpose. Keep that window short, and do not use CountRejected
// on it. The per-address limit bounds how many accounts one address can
// lock: an attempt the address limit refuses gives its username unit back.
//
// Progressive lockout (Config.AddressPenalty, a sluice.Penalty) blocks an
// address that keeps being refused, for longer each time: for example 1
// minute after 5 refusals, then 2, 4, up to an hour, forgiven after a day.
// It applies per address only, on purpose: an attacker who fails a
// victim's username on purpose then blocks only their own address, never
// the victim's account, while a per-username penalty would let anyone
// lock any account out for as long as the penalty grows. The price is
// that an attack spread over many addresses is slowed by the per-username
// limit alone (which never escalates). A blocked address is refused
// without its username being counted (Verdict.Blocked).
//
// A [Config] configures a Guard: it is data (what a configuration file or a
// flag set fills in, and a zero field its default), not the functional
// options (Option) with which package sluice and the stores configure
// what their constructors build; the Limiters in it carry those.
package login

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"
	"unicode"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/driver"
	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Config configures a Guard.
type Config struct {
	// Store keeps the counts. Required.
	Store driver.Store

	// Secret keys the hash of usernames, at least 16 bytes (32 random bytes
	// recommended). Required. Keep it secret and stable: a new secret gives
	// every username a new key, forgetting the counts.
	Secret []byte

	// PerUsername limits attempts per username (default SlidingLog{Limit:
	// 5, Window: 15 * time.Minute}): exact, so five failures lock the
	// account for the rest of the quarter hour.
	PerUsername sluice.Policy

	// PerAddress limits attempts per client address (default
	// SlidingLog{Limit: 50, Window: 15 * time.Minute}). Higher than
	// PerUsername, since many users may share an address behind NAT.
	PerAddress sluice.Policy

	// FailOpen allows attempts while the store is unavailable. Default
	// false: refuse them.
	FailOpen bool

	// Name is the start of the limiters' names (default "login"): the
	// limiters are Name+"-user" and Name+"-addr". Give each protected
	// action its own (login, reset, otp) for separate budgets.
	Name string

	// Normalize maps a username to its canonical form before hashing
	// (default Normalize). Usernames with the same canonical form share a
	// count.
	//
	// It must be at least as coarse as the account lookup: any two
	// spellings that reach the same account must normalise alike, or each
	// spelling gets its own budget and a locked-out account can be attacked
	// again under another spelling. Use the same function (or a finer one)
	// to find accounts, or replace this one with the lookup's canonical
	// form. Coarser is safe: two accounts that share a form share a budget.
	Normalize func(string) string

	// ClientIP groups client addresses into per-address keys (IPv6 by
	// prefix) and, for AttemptRequest, finds the client behind trusted
	// proxies. Default: a clientip.Resolver of the zero clientip.Config,
	// which trusts no proxy and groups IPv6 by /64.
	ClientIP *clientip.Resolver

	// AddressPenalty, when not zero, blocks an address that keeps being
	// refused by PerAddress (sluice.WithPenalty on the per-address limiter
	// only): progressive lockout per address, which an attacker cannot
	// turn against a victim's account (see the package doc). A blocked
	// attempt has Verdict.Blocked set and RetryAfter the block's end.
	AddressPenalty sluice.Penalty

	// Options are passed to both limiters after the guard's own, such as
	// sluice.WithPrefix, sluice.WithTimeout or sluice.WithObserver. A
	// penalty belongs in AddressPenalty, not here: here it would apply per
	// username too.
	Options []sluice.Option
}

// Default policies.
var (
	DefaultPerUsername = sluice.SlidingLog{Limit: 5, Window: 15 * time.Minute}
	DefaultPerAddress  = sluice.SlidingLog{Limit: 50, Window: 15 * time.Minute}
)

// A Guard limits login attempts per username and per client address. It is
// safe for concurrent use.
type Guard struct {
	user, addr *sluice.Limiter
	secret     []byte
	normalize  func(string) string
	clientIP   *clientip.Resolver
}

// New returns a Guard for cfg. It fails without a store, with a short
// secret, or with a policy sluice.New refuses.
func New(cfg Config) (*Guard, error) {
	if cfg.Store == nil {
		return nil, errors.New("login: nil store")
	}
	if len(cfg.Secret) < 16 {
		return nil, fmt.Errorf("login: secret must be at least 16 bytes, got %d", len(cfg.Secret))
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	user, addr, err := cfg.limiters()
	if err != nil {
		return nil, err
	}
	return &Guard{user: user, addr: addr, secret: append([]byte(nil), cfg.Secret...), normalize: cfg.Normalize, clientIP: cfg.ClientIP}, nil
}

// defaults sets cfg's unset fields to their defaults.
func (cfg *Config) defaults() error {
	if cfg.PerUsername == nil {
		cfg.PerUsername = DefaultPerUsername
	}
	if cfg.PerAddress == nil {
		cfg.PerAddress = DefaultPerAddress
	}
	if cfg.Name == "" {
		cfg.Name = "login"
	}
	if cfg.Normalize == nil {
		cfg.Normalize = Normalize
	}
	if cfg.ClientIP != nil {
		return nil
	}
	r, err := clientip.New(clientip.Config{})
	if err != nil {
		return fmt.Errorf("login: %w", err)
	}
	cfg.ClientIP = r
	return nil
}

// limiters makes the per-username and per-address limiters of cfg.
func (cfg *Config) limiters() (user, addr *sluice.Limiter, err error) {
	mode := sluice.FailClosed
	if cfg.FailOpen {
		mode = sluice.FailOpen
	}
	opts := func(suffix string) []sluice.Option {
		return append([]sluice.Option{sluice.WithName(cfg.Name + suffix), sluice.WithFailMode(mode)}, cfg.Options...)
	}
	user, err = sluice.New(cfg.Store, cfg.PerUsername, opts("-user")...)
	if err != nil {
		return nil, nil, fmt.Errorf("login: per-username limit: %w", err)
	}
	addrOpts := opts("-addr")
	if !cfg.AddressPenalty.IsZero() {
		addrOpts = append(addrOpts, sluice.WithPenalty(cfg.AddressPenalty))
	}
	addr, err = sluice.New(cfg.Store, cfg.PerAddress, addrOpts...)
	if err != nil {
		return nil, nil, fmt.Errorf("login: per-address limit: %w", err)
	}
	return user, addr, nil
}

// Tripped says which limits refused an attempt.
type Tripped uint8

// The limits of a Guard.
const (
	TrippedUsername Tripped = 1 << iota
	TrippedAddress
)

// String returns "none", "username", "address" or "username+address".
func (t Tripped) String() string {
	switch t {
	case 0:
		return "none"
	case TrippedUsername:
		return "username"
	case TrippedAddress:
		return "address"
	case TrippedUsername | TrippedAddress:
		return "username+address"
	}
	return fmt.Sprintf("Tripped(%d)", uint8(t))
}

// A Verdict is the outcome of an attempt.
type Verdict struct {
	// Allowed reports whether the attempt may go on to check the password.
	Allowed bool
	// Tripped says which limits refused the attempt (zero when allowed).
	// Telling the user "too many attempts for this account" reveals nothing
	// about its existence: unknown usernames trip alike.
	Tripped Tripped
	// RetryAfter is when the attempt could be allowed, zero when allowed.
	RetryAfter time.Duration
	// Degraded reports that the store could not decide and the fail mode
	// did.
	Degraded bool
	// Blocked reports that the address is blocked by Config.AddressPenalty
	// (Address.Blocked): RetryAfter is then at least the block's end.
	Blocked bool
	// Username and Address are the two limits' Results.
	Username, Address sluice.Result
}

// ErrNoClientAddr is returned (wrapped) by AttemptRequest when the
// request's client address cannot be parsed, such as over a Unix socket.
var ErrNoClientAddr = errors.New("login: client address unknown")

// AttemptRequest is Attempt for the client of r, as Config.ClientIP finds
// it (the TCP peer, or the client behind trusted proxies), with r's
// context. It fails with ErrNoClientAddr when the address cannot be
// parsed.
func (g *Guard) AttemptRequest(r *http.Request, username string) (Verdict, error) {
	a, ok := g.clientIP.Addr(r)
	if !ok {
		return Verdict{}, fmt.Errorf("%w: peer %q", ErrNoClientAddr, r.RemoteAddr)
	}
	return g.Attempt(r.Context(), username, a)
}

// Attempt counts one login attempt for username (as typed) from the client
// address addr, and reports whether it may proceed. The address is counted
// under its group (Config.ClientIP: IPv6 by prefix), never with a port:
// parse r.RemoteAddr with clientip, or use AttemptRequest. Both limits are
// checked together (sluice.AllowAll): a refused attempt takes nothing from
// the limit that allowed it. The error is non-nil only for an invalid
// (zero) addr or when ctx ends.
func (g *Guard) Attempt(ctx context.Context, username string, addr netip.Addr) (Verdict, error) {
	key, err := g.addressKey(addr)
	if err != nil {
		return Verdict{}, err
	}
	d, err := sluice.AllowAll(ctx, []sluice.Check{
		{Limiter: g.user, Key: g.UsernameKey(username), Cost: 1},
		{Limiter: g.addr, Key: key, Cost: 1},
	})
	if err != nil {
		return Verdict{}, fmt.Errorf("login: %w", err)
	}
	v := Verdict{
		Allowed:    d.Allowed,
		RetryAfter: d.RetryAfter(),
		Username:   d.Results[0],
		Address:    d.Results[1],
		Degraded:   d.Results[0].Degraded || d.Results[1].Degraded,
		Blocked:    d.Results[1].Blocked,
	}
	v.Tripped = tripped(v.Username.Allowed, v.Address.Allowed)
	return v, nil
}

// tripped says which limits refused: those that did not allow.
func tripped(userAllowed, addrAllowed bool) Tripped {
	var t Tripped
	if !userAllowed {
		t |= TrippedUsername
	}
	if !addrAllowed {
		t |= TrippedAddress
	}
	return t
}

// Success clears the per-username count of username after a correct
// password, so earlier typos do not count against the next login. The
// per-address count stays. Call it only after the password was verified:
// it is an unlock.
func (g *Guard) Success(ctx context.Context, username string) error {
	if err := g.user.Reset(ctx, g.UsernameKey(username)); err != nil {
		return fmt.Errorf("login: %w", err)
	}
	return nil
}

// ResetAddress clears the per-address count of addr (of its whole group,
// for IPv6), for operators unlocking an office behind one NAT address.
func (g *Guard) ResetAddress(ctx context.Context, addr netip.Addr) error {
	key, err := g.addressKey(addr)
	if err != nil {
		return err
	}
	if err := g.addr.Reset(ctx, key); err != nil {
		return fmt.Errorf("login: %w", err)
	}
	return nil
}

// UsernameKey returns the identity username is counted under:
// "user:<hex HMAC-SHA256 of the normalised username>". It is the same for
// every spelling Normalize maps together, and reveals nothing of the
// username without the secret.
func (g *Guard) UsernameKey(username string) string {
	mac := hmac.New(sha256.New, g.secret)
	mac.Write([]byte(g.normalize(username)))
	return sluice.Identity("user", hex.EncodeToString(mac.Sum(nil)))
}

// addressKey returns the identity addr is counted under: its clientip
// group, such as "ip:192.0.2.7" or "ip:2001:db8:1:2::/64".
func (g *Guard) addressKey(addr netip.Addr) (string, error) {
	if !addr.IsValid() {
		return "", fmt.Errorf("login: invalid client address: %w", sluice.ErrInvalidKey)
	}
	return sluice.Identity("ip", g.clientIP.KeyOf(addr)), nil
}

// Limiters returns the per-username and per-address limiters, for metrics,
// inspection or resets by key.
func (g *Guard) Limiters() (perUsername, perAddress *sluice.Limiter) { return g.user, g.addr }

// Normalize returns the canonical form of a username, Unicode's
// NFKC_Casefold with surrounding white space removed:
//
//   - default-ignorable code points (zero-width space U+200B, soft hyphen
//     U+00AD, U+FEFF, word joiner U+2060, variation selectors, tags, ...:
//     the whole Default_Ignorable_Code_Point set) are removed, since they
//     are invisible and an account lookup may drop them too;
//   - compatibility characters become their plain forms (NFKC: full-width
//     "ＡＤＭＩＮ" is "admin");
//   - case is folded ("Alice@Example.COM" and "alice@example.com" are one
//     user, as are "Straße" and "STRASSE").
//
// Normalize is idempotent. Usernames the account lookup treats as one must
// normalise alike (see Config.Normalize).
func Normalize(username string) string {
	// The steps of NFKC_Casefold's definition (ignorables removed, NFKC,
	// full case folding, NFKC again), repeated until the result is stable
	// so that Normalize is idempotent; two rounds suffice in practice, the
	// bound only caps the work. Invalid UTF-8 becomes U+FFFD first, so
	// that every later step sees the same runes.
	s := strings.ToValidUTF8(username, "\uFFFD")
	for range 4 {
		n := removeIgnorable(s)
		n = norm.NFKC.String(n)
		n = cases.Fold().String(n)
		n = norm.NFKC.String(removeIgnorable(n))
		n = strings.TrimSpace(n)
		if n == s {
			break
		}
		s = n
	}
	return s
}

// removeIgnorable returns s without its default-ignorable code points.
func removeIgnorable(s string) string {
	if strings.IndexFunc(s, isDefaultIgnorable) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if isDefaultIgnorable(r) {
			return -1
		}
		return r
	}, s)
}

// isDefaultIgnorable reports whether r has Unicode's
// Default_Ignorable_Code_Point property, derived from the standard
// library's tables exactly as DerivedCoreProperties.txt derives it:
// Other_Default_Ignorable_Code_Point, format characters (Cf) and variation
// selectors, minus white space, the interlinear annotation characters
// U+FFF9..U+FFFB, the Egyptian hieroglyph format controls U+13430..U+1343F
// and the prepended concatenation marks.
func isDefaultIgnorable(r rune) bool {
	if r < 0xAD {
		return false // fast path for ASCII and Latin-1 before the soft hyphen
	}
	if !unicode.In(r, unicode.Other_Default_Ignorable_Code_Point, unicode.Cf, unicode.Variation_Selector) {
		return false
	}
	return !unicode.Is(unicode.White_Space, r) &&
		!(0xFFF9 <= r && r <= 0xFFFB) &&
		!(0x13430 <= r && r <= 0x1343F) &&
		!unicode.Is(unicode.Prepended_Concatenation_Mark, r)
}
