package login

import (
	"context"
	"crypto/subtle"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/valkeystore"
	"github.com/sluicehq/sluice/valkeytest"
)

func TestMain(m *testing.M) { valkeytest.Main(m) }

// loginHandler is a minimal sign-in endpoint: the guard first, then the
// password, the same answer for a wrong password and an unknown account.
func loginHandler(g *Guard, users map[string]string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass := r.PostFormValue("username"), r.PostFormValue("password")
		v, err := g.AttemptRequest(r, user)
		if err != nil {
			http.Error(w, "error", http.StatusInternalServerError)
			return
		}
		if !v.Allowed {
			w.Header().Set("Retry-After", strconv.FormatInt(int64((v.RetryAfter+time.Second-1)/time.Second), 10))
			http.Error(w, "too many attempts ("+v.Tripped.String()+")", http.StatusTooManyRequests)
			return
		}
		want, ok := users[Normalize(user)]
		if !ok {
			want = "\x00no account" // compare anyway, in the same time
		}
		if subtle.ConstantTimeCompare([]byte(pass), []byte(want)) != 1 || !ok {
			http.Error(w, "wrong username or password", http.StatusUnauthorized)
			return
		}
		g.Success(r.Context(), user)
		w.Write([]byte("welcome"))
	})
}

func TestEndToEndValkey(t *testing.T) {
	srv := valkeytest.Shared(t)
	client := srv.Client(t)
	store, err := valkeystore.New(client)
	if err != nil {
		t.Fatal(err)
	}
	prefix := "rl:t" + strconv.FormatInt(time.Now().UnixNano(), 36)
	g, err := New(Config{
		Store:       store,
		Secret:      secret,
		PerUsername: sluice.SlidingLog{Limit: 3, Window: time.Minute},
		PerAddress:  sluice.SlidingLog{Limit: 10, Window: time.Minute},
		Options:     []sluice.Option{sluice.WithPrefix(prefix), sluice.WithTimeout(time.Second)},
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(loginHandler(g, map[string]string{"alice@example.com": "correct horse"}))
	defer hs.Close()

	post := func(user, pass string) (int, string) {
		resp, err := http.PostForm(hs.URL, url.Values{"username": {user}, "password": {pass}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, strings.TrimSpace(b.String())
	}
	type step struct {
		user, pass string
		code       int
		body       string
	}
	for i, s := range []step{
		{"alice@example.com", "guess1", 401, "wrong username or password"},
		{"Alice@Example.com", "correct horse", 200, "welcome"}, // clears alice's count
		{"alice@example.com", "guess2", 401, "wrong username or password"},
		{"alice@example.com", "guess3", 401, "wrong username or password"},
		{"alice@example.com", "guess4", 401, "wrong username or password"},
		{"alice@example.com", "correct horse", 429, "too many attempts (username)"},
		// Unknown accounts: same answers, same limit.
		{"ghost@example.com", "guess1", 401, "wrong username or password"},
		{"ghost@example.com", "guess2", 401, "wrong username or password"},
		{"ghost@example.com", "guess3", 401, "wrong username or password"},
		{"ghost@example.com", "guess4", 429, "too many attempts (username)"},
		// The address allows 10 attempts. 8 were counted: the two
		// attempts the username limit refused had their address unit
		// given back. Two more, then the address limit trips.
		{"bob", "x", 401, "wrong username or password"},
		{"carol", "x", 401, "wrong username or password"},
		{"dave", "x", 429, "too many attempts (address)"},
	} {
		code, body := post(s.user, s.pass)
		if code != s.code || body != s.body {
			t.Fatalf("step %d %s/%s: %d %q; want %d %q", i, s.user, s.pass, code, body, s.code, s.body)
		}
	}
	// The keys hold no username, and all expire.
	ttls, err := valkeytest.TTLs(context.Background(), client, prefix+":*")
	if err != nil {
		t.Fatal(err)
	}
	if len(ttls) == 0 {
		t.Fatal("no keys")
	}
	for k, ttl := range ttls {
		lk := strings.ToLower(k)
		for _, name := range []string{"alice", "ghost", "bob", "carol", "example"} {
			if strings.Contains(lk, name) {
				t.Errorf("key %q holds a username", k)
			}
		}
		if ttl <= 0 || ttl > 2*time.Minute {
			t.Errorf("key %q TTL %v", k, ttl)
		}
	}
}
