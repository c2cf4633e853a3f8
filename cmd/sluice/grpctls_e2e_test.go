package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/cmd/sluice/internal/envoy"
	"github.com/sluicehq/sluice/valkeytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// testCA is a certificate authority made in the test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	pool *x509.CertPool
}

var serial int64 = 100

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pool: pool}
}

// issue makes a certificate for dnsNames (and 127.0.0.1) of usage usage,
// and returns its PEM certificate and key.
func (ca *testCA) issue(t *testing.T, usage x509.ExtKeyUsage, dnsNames ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"}, DNSNames: dnsNames,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

func writeBytes(t *testing.T, path string, data []byte) string {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tlsEnvoyEnv starts sluice serve in envoyproxy/ratelimit's environment
// with the gRPC TLS variables given.
func tlsEnvoyEnv(t *testing.T, extra ...string) *proc {
	t.Helper()
	v := valkeytest.Shared(t)
	root := t.TempDir()
	runtimeTree(t, root, "v1", map[string]string{"ps.yaml": perSecondConfig})
	p := serve(t, append([]string{
		"RUNTIME_ROOT=" + filepath.Join(root, "current"), "RUNTIME_SUBDIRECTORY=ratelimit",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + v.Addr, "USE_STATSD=false", "LOG_FORMAT=json", "LOG_LEVEL=info",
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0", "CACHE_KEY_PREFIX=" + t.Name(), "GRPC_SERVER_USE_TLS=true",
	}, extra...))
	waitReady(t, p)
	return p
}

// callTLS makes one ShouldRateLimit call over TLS with tc; the error of
// the handshake or the call.
func callTLS(t *testing.T, addr string, tc *tls.Config) error {
	t.Helper()
	creds := insecure.NewCredentials()
	if tc != nil {
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	r, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "ps",
		Descriptors: []*commonrl.RateLimitDescriptor{{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "slow", Value: "tls"}}}}})
	if err == nil && r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("answer %v", r)
	}
	return err
}

// TestEnvoyGRPCMutualTLS: GRPC_SERVER_USE_TLS serves gRPC over TLS;
// GRPC_CLIENT_TLS_CACERT requires a client certificate its CA signed,
// and GRPC_CLIENT_TLS_SAN one for that name (upstream's Test_mTLS, with
// the refusals checked too).
func TestEnvoyGRPCMutualTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA, otherCA := newTestCA(t, "server CA"), newTestCA(t, "client CA"), newTestCA(t, "other CA")
	sc, sk := serverCA.issue(t, x509.ExtKeyUsageServerAuth, "localhost")
	p := tlsEnvoyEnv(t, "GRPC_SERVER_TLS_CERT="+writeBytes(t, filepath.Join(dir, "s.pem"), sc),
		"GRPC_SERVER_TLS_KEY="+writeBytes(t, filepath.Join(dir, "s.key"), sk),
		"GRPC_CLIENT_TLS_CACERT="+writeBytes(t, filepath.Join(dir, "client-ca.pem"), clientCA.pem),
		"GRPC_CLIENT_TLS_SAN=localhost")
	client := func(ca *testCA, names ...string) *tls.Config {
		c, k := ca.issue(t, x509.ExtKeyUsageClientAuth, names...)
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return &tls.Config{RootCAs: serverCA.pool, ServerName: "localhost", Certificates: []tls.Certificate{pair}}
	}
	if err := callTLS(t, p.GRPC, client(clientCA, "localhost")); err != nil {
		t.Fatalf("a client certificate of the CA, for localhost: %v", err)
	}
	for what, tc := range map[string]*tls.Config{
		"no client certificate":                 {RootCAs: serverCA.pool, ServerName: "localhost"},
		"a client certificate of another CA":    client(otherCA, "localhost"),
		"a client certificate for another name": client(clientCA, "other.example"),
		"plain text":                            nil,
	} {
		if err := callTLS(t, p.GRPC, tc); err == nil {
			t.Errorf("%s: the call was answered", what)
		}
	}
}

// TestEnvoyGRPCServerCertReload: the server certificate is read again when
// its files change: after new files are renamed over them (as upstream's
// TestReloadGRPCServerCerts does), clients trusting the new CA connect and
// those trusting only the old one no longer do. While the new certificate
// is there without its key, the pair does not load: that is logged and
// the old certificate is still served.
func TestEnvoyGRPCServerCertReload(t *testing.T) {
	dir := t.TempDir()
	ca1, ca2 := newTestCA(t, "first"), newTestCA(t, "second")
	c1, k1 := ca1.issue(t, x509.ExtKeyUsageServerAuth, "localhost")
	certFile, keyFile := writeBytes(t, filepath.Join(dir, "tls.crt"), c1), writeBytes(t, filepath.Join(dir, "tls.key"), k1)
	p := tlsEnvoyEnv(t, "GRPC_SERVER_TLS_CERT="+certFile, "GRPC_SERVER_TLS_KEY="+keyFile)
	trusting := func(ca *testCA) *tls.Config { return &tls.Config{RootCAs: ca.pool, ServerName: "localhost"} }
	if err := callTLS(t, p.GRPC, trusting(ca1)); err != nil {
		t.Fatalf("with the first certificate: %v", err)
	}
	if err := callTLS(t, p.GRPC, trusting(ca2)); err == nil {
		t.Fatal("a client trusting only the second CA connected before the change")
	}
	c2, k2 := ca2.issue(t, x509.ExtKeyUsageServerAuth, "localhost")
	newCert, newKey := writeBytes(t, filepath.Join(dir, "new.crt"), c2), writeBytes(t, filepath.Join(dir, "new.key"), k2)
	if err := os.Rename(newCert, certFile); err != nil {
		t.Fatal(err)
	}
	waitFor(t, p, "the certificate without its key logged", func() bool {
		return strings.Contains(p.Logs(), "gRPC server certificate not reloaded; the one being served stays")
	})
	if err := callTLS(t, p.GRPC, trusting(ca1)); err != nil {
		t.Fatalf("the old certificate is not served while the new one has not its key: %v", err)
	}
	if err := os.Rename(newKey, keyFile); err != nil {
		t.Fatal(err)
	}
	// Read again within the watch's debounce, or at worst the poll.
	deadline := time.Now().Add(envoy.CertPoll + 5*time.Second)
	for callTLS(t, p.GRPC, trusting(ca2)) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the new certificate is not served after %v:\n%s", envoy.CertPoll+5*time.Second, p.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := callTLS(t, p.GRPC, trusting(ca1)); err == nil {
		t.Error("a client trusting only the first CA still connects")
	}
}

// mtlsEnvoyEnv starts sluice serve with a server certificate of serverCA
// and GRPC_CLIENT_TLS_CACERT=caFile; client makes clients trusting
// serverCA with a client certificate of ca.
func mtlsEnvoyEnv(t *testing.T, serverCA *testCA, caFile string) (p *proc, client func(ca *testCA) *tls.Config) {
	t.Helper()
	dir := t.TempDir()
	sc, sk := serverCA.issue(t, x509.ExtKeyUsageServerAuth, "localhost")
	p = tlsEnvoyEnv(t, "GRPC_SERVER_TLS_CERT="+writeBytes(t, filepath.Join(dir, "s.pem"), sc),
		"GRPC_SERVER_TLS_KEY="+writeBytes(t, filepath.Join(dir, "s.key"), sk), "GRPC_CLIENT_TLS_CACERT="+caFile)
	return p, func(ca *testCA) *tls.Config {
		c, k := ca.issue(t, x509.ExtKeyUsageClientAuth, "localhost")
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return &tls.Config{RootCAs: serverCA.pool, ServerName: "localhost", Certificates: []tls.Certificate{pair}}
	}
}

// renameOver writes data next to path and renames it over path, as
// Kubernetes and certificate managers replace files.
func renameOver(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.Rename(writeBytes(t, path+".new", data), path); err != nil {
		t.Fatal(err)
	}
}

// reloadWait is how long a file change may take to be read: the watch's
// debounce, or at worst the poll.
const reloadWait = envoy.CertPoll + 5*time.Second

// waitFor polls cond until it holds, failing after reloadWait.
func waitFor(t *testing.T, p *proc, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(reloadWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v:\n%s", what, reloadWait, p.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// caErrors counts the errors logged for a client CA that did not load
// whose err holds errPart.
func caErrors(t *testing.T, p *proc, errPart string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(p.Logs(), "\n") {
		var l struct{ Level, Msg, Err string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Level == "ERROR" &&
			l.Msg == "gRPC client CA not reloaded; the last good one stays" && strings.Contains(l.Err, errPart) {
			n++
		}
	}
	return n
}

// TestEnvoyGRPCClientCAReload: the client CA is read again when its file
// changes: a client certificate of a new CA is refused until the file
// holds that CA and accepted after it, and one of the old CA is refused
// on new connections after; a connection made before stays.
func TestEnvoyGRPCClientCAReload(t *testing.T) {
	serverCA, oldCA, newCA := newTestCA(t, "server CA"), newTestCA(t, "old client CA"), newTestCA(t, "new client CA")
	caFile := writeBytes(t, filepath.Join(t.TempDir(), "client-ca.pem"), oldCA.pem)
	p, client := mtlsEnvoyEnv(t, serverCA, caFile)
	oldClient, newClient := client(oldCA), client(newCA)
	if err := callTLS(t, p.GRPC, oldClient); err != nil {
		t.Fatalf("a client of the CA in the file: %v", err)
	}
	if err := callTLS(t, p.GRPC, newClient); err == nil {
		t.Fatal("a client of the new CA was answered before the file held it")
	}
	conn, err := grpc.NewClient(p.GRPC, grpc.WithTransportCredentials(credentials.NewTLS(oldClient)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "ps",
			Descriptors: []*commonrl.RateLimitDescriptor{{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "slow", Value: "tls"}}}}})
		return err
	}
	if err := call(); err != nil {
		t.Fatalf("a connection of the old CA: %v", err)
	}
	renameOver(t, caFile, newCA.pem)
	waitFor(t, p, "a client of the new CA answered", func() bool { return callTLS(t, p.GRPC, newClient) == nil })
	if err := callTLS(t, p.GRPC, oldClient); err == nil {
		t.Error("a client of the old CA is answered after the file no longer holds it")
	}
	if err := call(); err != nil {
		t.Errorf("the connection of the old CA made before the change: %v", err)
	}
	if !strings.Contains(p.Logs(), "gRPC client CA reloaded") {
		t.Errorf("the reload is not logged:\n%s", p.Logs())
	}
}

// TestEnvoyGRPCClientCABrokenKeepsLast: a client CA file that holds no
// PEM certificate, or is gone, is logged as an error and the last good CA
// stays: its clients are answered, others and clients without a
// certificate still refused; a good file after it is read.
func TestEnvoyGRPCClientCABrokenKeepsLast(t *testing.T) {
	serverCA, goodCA, otherCA := newTestCA(t, "server CA"), newTestCA(t, "client CA"), newTestCA(t, "other CA")
	caFile := writeBytes(t, filepath.Join(t.TempDir(), "client-ca.pem"), goodCA.pem)
	p, client := mtlsEnvoyEnv(t, serverCA, caFile)
	goodClient, otherClient := client(goodCA), client(otherCA)
	noCert := &tls.Config{RootCAs: serverCA.pool, ServerName: "localhost"}
	if err := callTLS(t, p.GRPC, goodClient); err != nil {
		t.Fatalf("a client of the CA in the file: %v", err)
	}
	keeps := func(state string) {
		t.Helper()
		if err := callTLS(t, p.GRPC, goodClient); err != nil {
			t.Errorf("%s: a client of the last good CA is refused: %v", state, err)
		}
		for what, tc := range map[string]*tls.Config{"without a client certificate": noCert, "of another CA": otherClient} {
			if err := callTLS(t, p.GRPC, tc); err == nil {
				t.Errorf("%s: a client %s is answered", state, what)
			}
		}
	}
	renameOver(t, caFile, []byte("not a certificate\n"))
	waitFor(t, p, "the CA without a PEM certificate logged", func() bool { return caErrors(t, p, "no PEM certificate found") > 0 })
	keeps("no PEM certificate")
	if err := os.Remove(caFile); err != nil {
		t.Fatal(err)
	}
	waitFor(t, p, "the missing CA file logged", func() bool { return caErrors(t, p, "no such file") > 0 })
	keeps("no file")
	renameOver(t, caFile, otherCA.pem)
	waitFor(t, p, "a client of the CA in the good file answered", func() bool { return callTLS(t, p.GRPC, otherClient) == nil })
}
