package config

import (
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
)

// The validated configuration's types.

// Valkey says how to reach Valkey.
type Valkey struct {
	// Addresses of one server, or seed addresses of a cluster (several
	// addresses: the client discovers the topology). Empty when they are to
	// come from the command line (sluice serve --valkey).
	Addresses []string
	Username  string
	// PasswordEnv names an environment variable holding the password;
	// PasswordFile a file holding it (trailing newline removed). At most one.
	PasswordEnv, PasswordFile string
	// TLS is nil for plain TCP.
	TLS *TLS
	// Timeout bounds each decision (default sluice.DefaultTimeout, 50ms);
	// when it passes, the policy's on_failure decides.
	Timeout time.Duration
	// ConnectTimeout bounds opening a connection (default 2s).
	ConnectTimeout time.Duration
	// Sentinel, when set, finds the master through Valkey Sentinel (and
	// follows it when the Sentinels fail over); Addresses is then empty.
	// Username, the password and TLS above are the master's.
	Sentinel *Sentinel
}

// Sentinel configures Valkey Sentinel: the master set to follow, the
// Sentinels to ask, and the Sentinels' own credentials (optional).
type Sentinel struct {
	MasterSet string
	// Addresses of the Sentinels (host:port), at least one.
	Addresses []string
	Username  string
	// PasswordEnv or PasswordFile (at most one) hold the Sentinels'
	// password, when they require one.
	PasswordEnv, PasswordFile string
}

// TLS configures TLS to Valkey.
type TLS struct {
	// CAFile holds PEM certificates of the authorities to trust (default:
	// the system's).
	CAFile string
	// CertFile and KeyFile are a client certificate (mutual TLS), optional.
	CertFile, KeyFile string
	// ServerName overrides the name checked in the server's certificate.
	ServerName string
}

// Admin configures the admin routes' bearer token.
type Admin struct {
	// TokenEnv names an environment variable holding the token; TokenFile a
	// file holding it. Exactly one is set.
	TokenEnv, TokenFile string
}

// Headers selects the rate-limit response headers to send.
type Headers uint8

// The header families.
const (
	// HeadersXRateLimit: X-RateLimit-Limit, X-RateLimit-Remaining,
	// X-RateLimit-Reset (seconds until the limit is fully restored).
	HeadersXRateLimit Headers = 1 << iota
	// HeadersIETF: the IETF draft's RateLimit-Policy and RateLimit fields.
	HeadersIETF
	// HeadersRetryAfter: Retry-After in whole seconds on refusals.
	HeadersRetryAfter

	HeadersAll  = HeadersXRateLimit | HeadersIETF | HeadersRetryAfter
	HeadersNone = Headers(0)
)

var headerNames = []struct {
	name string
	h    Headers
}{{"x-ratelimit", HeadersXRateLimit}, {"ietf", HeadersIETF}, {"retry-after", HeadersRetryAfter}}

// Names lists the header families in h, such as [x-ratelimit retry-after].
func (h Headers) Names() []string {
	out := []string{}
	for _, n := range headerNames {
		if h&n.h != 0 {
			out = append(out, n.name)
		}
	}
	return out
}

// Policy is one named limit.
type Policy struct {
	Name string
	// Limiter is the name of the limiter and the second part of its keys:
	// the policy's name and its algorithm, such as "api.token_bucket", so
	// that changing a policy's algorithm never meets the old state.
	Limiter   string
	Algorithm driver.Algorithm
	// Policy is the sluice policy, validated.
	Policy sluice.Policy
	// Params are the numbers Policy was made of.
	Params driver.Params
	// Limit is the limit, capacity or burst.
	Limit    int64
	FailMode sluice.FailMode
	Shadow   bool
	// Timeout bounds each decision (0: the valkey section's, or 50ms).
	Timeout time.Duration
	Headers Headers
	// Description is free text shown by GET /v1/policies.
	Description string
	// ShowKeys says how the policy's keys appear among the top refused
	// keys (the dashboard and GET /v1/top-refused): hashed by default.
	ShowKeys KeyDisplay
	// Envoy reports a policy generated from an envoyproxy/ratelimit
	// rate_limit; Domain is its domain.
	Envoy  bool
	Domain string
	// EnvoyLimit is the rate_limit the policy was generated from, nil for
	// a named policy.
	EnvoyLimit *EnvoyLimit
	// Overrides makes every decision read the key's override (see
	// PUT /v1/overrides): the option sluice.WithOverrides.
	Overrides bool
	// Plans are the policy's named plans, in the order given.
	Plans []Plan
	// MaxDebt is max_debt: the largest debt a reservation's settle may
	// leave (sluice.ReserveOptions.MaxDebt); nil for the default, the
	// limit. Reservations are on for every policy whose algorithm keeps
	// them (fixed_window, token_bucket, gcra).
	MaxDebt *int64
	// DenyCache turns the local deny cache on (sluice.WithDenyCache): the
	// default where it can apply (not with count_rejected, overrides or
	// plans). A reset made by any process reaches it through Valkey's
	// pub/sub (valkeystore.NoticeBound).
	DenyCache bool
	// WarnAt is the percent of the limit used from which an allowed
	// decision warns (sluice.WithWarning); 0 for none. WarningHeader
	// sends X-RateLimit-Warning with such decisions.
	WarnAt        int
	WarningHeader bool
	// DenyStatus is the HTTP status of the policy's refusals (0: 429);
	// DenyBody, when set, the JSON document sent with them instead of
	// problem+json.
	DenyStatus int
	DenyBody   []byte
	// Wait is how long a request the policy refuses may wait for
	// admission, all told, in /v1/check, reservations and forward auth
	// (0: refused at once).
	Wait time.Duration
	// Penalty is the policy's penalty for repeat offenders
	// (sluice.WithPenalty); nil for none.
	Penalty *sluice.Penalty
	// Grants is grants: auto (sluice.WithGrants with GrantOptions): the
	// processes decide locally against grants of each key's limit.
	Grants       bool
	GrantOptions sluice.GrantOptions
	// Line is where the policy is defined.
	Line int
}

// Plan is a named plan of a policy: the same algorithm and window with
// another limit (and rate).
type Plan struct {
	Name   string
	Policy sluice.Policy
	Limit  int64
}

// Window returns the span the policy's limit is measured over, as shown to
// clients: its Rule's Period.
func (p *Policy) Window() time.Duration {
	r, err := p.Policy.Rule()
	if err != nil {
		return 0
	}
	return r.Period()
}

// KeyDisplay says how a policy's keys are shown to operators (never as
// metric labels).
type KeyDisplay uint8

// The ways to show keys.
const (
	// KeysHashed shows a keyed hash of the key, stable while the process
	// runs: the same key is recognisable, its value is not.
	KeysHashed KeyDisplay = iota
	// KeysTruncated shows the first TruncatedKeyBytes bytes and the length.
	KeysTruncated
	// KeysRaw shows the key as the client sent it.
	KeysRaw
)

// TruncatedKeyBytes is how much of a key KeysTruncated shows.
const TruncatedKeyBytes = 6

var keyDisplays = map[string]KeyDisplay{"hashed": KeysHashed, "truncated": KeysTruncated, "raw": KeysRaw}

// String returns the show_keys value: hashed, truncated or raw.
func (k KeyDisplay) String() string {
	for name, v := range keyDisplays {
		if v == k {
			return name
		}
	}
	return "hashed"
}
