package envoy

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// GRPC_SERVER_USE_TLS=true: the gRPC port serves TLS with the certificate
// GRPC_SERVER_TLS_CERT and key GRPC_SERVER_TLS_KEY, reloaded when the files
// change, as envoyproxy/ratelimit does. GRPC_CLIENT_TLS_CACERT makes it
// require a client certificate signed by that CA (also reloaded when the
// file changes, which upstream does not), and GRPC_CLIENT_TLS_SAN a client
// certificate for that name.

// GRPCTLS is the gRPC server's TLS from the environment.
type GRPCTLS struct {
	CertFile, KeyFile string
	// ClientCAFile, when set, requires client certificates it signed.
	ClientCAFile string
	// ClientSAN, when set, is the name a client certificate must hold
	// (a DNS or IP subject alternative name).
	ClientSAN string
}

// grpcTLSVariables are the variables of the gRPC server's TLS, unused
// unless GRPC_SERVER_USE_TLS is true.
var grpcTLSVariables = []string{"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN"}

// readGRPCTLS reads GRPC_SERVER_USE_TLS and its files into e.GRPCTLS.
func (e *Env) readGRPCTLS(get func(k, def string) string, boolean func(string, bool) bool, bad func(string, ...any)) {
	if !boolean("GRPC_SERVER_USE_TLS", false) {
		for _, k := range grpcTLSVariables {
			if v := get(k, ""); v != "" {
				e.Notes = append(e.Notes, k+"="+v+" is not used: GRPC_SERVER_USE_TLS is not true (as upstream)")
			}
		}
		return
	}
	t := &GRPCTLS{CertFile: get("GRPC_SERVER_TLS_CERT", ""), KeyFile: get("GRPC_SERVER_TLS_KEY", ""),
		ClientCAFile: get("GRPC_CLIENT_TLS_CACERT", ""), ClientSAN: get("GRPC_CLIENT_TLS_SAN", "")}
	if t.CertFile == "" || t.KeyFile == "" {
		bad("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
	}
	if t.ClientSAN != "" && t.ClientCAFile == "" {
		bad("GRPC_CLIENT_TLS_SAN needs GRPC_CLIENT_TLS_CACERT: without it no client certificate is asked for, so none could be checked")
	}
	e.GRPCTLS = t
}

// ServerCerts is the gRPC server's certificate and, under
// GRPC_CLIENT_TLS_CACERT, the client CA, read from their files and read
// again when they change (Watch).
type ServerCerts struct {
	t    GRPCTLS
	log  *slog.Logger
	cert atomic.Pointer[tls.Certificate]
	sum  [32]byte // of the files the certificate was read from
	// base is the configuration of handshakes but for the client CA;
	// forClient is base with the client CA being used (caSum that of
	// its file), the configuration of each new handshake. Nil without
	// GRPC_CLIENT_TLS_CACERT.
	base      *tls.Config
	forClient atomic.Pointer[tls.Config]
	caSum     [32]byte
}

// ServerConfig loads the certificate, and the client CA when set, and
// returns the gRPC server's TLS configuration (TLS 1.2 at least; client
// certificates required and verified under GRPC_CLIENT_TLS_CACERT, their
// name checked under GRPC_CLIENT_TLS_SAN) with the certificates to watch.
// A file that does not load is an error: the service refuses to start.
// Each handshake takes the client CA last loaded (GetConfigForClient), so
// a reloaded CA applies to the connections made after it.
func (t *GRPCTLS) ServerConfig(log *slog.Logger) (*tls.Config, *ServerCerts, error) {
	sc := &ServerCerts{t: *t, log: log}
	if _, err := sc.load(); err != nil {
		return nil, nil, err
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return sc.cert.Load(), nil }}
	if san := t.ClientSAN; san != "" {
		tc.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
			if len(chains) == 0 || len(chains[0]) == 0 {
				return errors.New("no verified client certificate")
			}
			if err := chains[0][0].VerifyHostname(san); err != nil {
				log.Warn("gRPC client certificate refused: not for GRPC_CLIENT_TLS_SAN", "san", san, "err", err.Error())
				return fmt.Errorf("client certificate: %w", err)
			}
			return nil
		}
	}
	if t.ClientCAFile != "" {
		tc.ClientAuth = tls.RequireAndVerifyClientCert
		sc.base = tc.Clone()
		if _, err := sc.loadCA(); err != nil {
			return nil, nil, err
		}
		tc.ClientCAs = sc.forClient.Load().ClientCAs
		tc.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { return sc.forClient.Load(), nil }
	}
	return tc, sc, nil
}

// load reads the certificate and key files and, when they differ from the
// ones being served, serves them; it reports whether it did. On error the
// certificate being served stays.
func (sc *ServerCerts) load() (bool, error) {
	certPEM, err := os.ReadFile(sc.t.CertFile)
	if err != nil {
		return false, fmt.Errorf("GRPC_SERVER_TLS_CERT: %w", err)
	}
	keyPEM, err := os.ReadFile(sc.t.KeyFile)
	if err != nil {
		return false, fmt.Errorf("GRPC_SERVER_TLS_KEY: %w", err)
	}
	sum := sha256.Sum256(append(append(certPEM, 0), keyPEM...))
	if sc.cert.Load() != nil && sum == sc.sum {
		return false, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return false, fmt.Errorf("GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY (%s, %s): %w", sc.t.CertFile, sc.t.KeyFile, err)
	}
	sc.sum = sum
	sc.cert.Store(&cert)
	return true, nil
}

// loadCA reads the client CA file and, when it differs from the one in
// use, makes new handshakes verify client certificates against it; it
// reports whether it did. A file that cannot be read or holds no PEM
// certificate is an error and the CA in use stays: client certificates
// are never left unverified.
func (sc *ServerCerts) loadCA() (bool, error) {
	data, err := os.ReadFile(sc.t.ClientCAFile)
	if err != nil {
		return false, fmt.Errorf("GRPC_CLIENT_TLS_CACERT: %w", err)
	}
	sum := sha256.Sum256(data)
	if sc.forClient.Load() != nil && sum == sc.caSum {
		return false, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return false, fmt.Errorf("GRPC_CLIENT_TLS_CACERT %s: no PEM certificate found", sc.t.ClientCAFile)
	}
	c := sc.base.Clone()
	c.ClientCAs = pool
	sc.caSum = sum
	sc.forClient.Store(c)
	return true, nil
}

// reload reads the files again, logging the outcome: a pair that does not
// load (such as a certificate replaced before its key) is logged, and the
// certificate being served stays until a good pair is there; a client CA
// that does not load is logged as an error, and the last good one stays.
func (sc *ServerCerts) reload() {
	changed, err := sc.load()
	switch {
	case err != nil:
		sc.log.Warn("gRPC server certificate not reloaded; the one being served stays", "err", err.Error())
	case changed:
		sc.log.Info("gRPC server certificate reloaded", "cert", sc.t.CertFile, "key", sc.t.KeyFile)
	}
	if sc.base == nil {
		return
	}
	changed, err = sc.loadCA()
	switch {
	case err != nil:
		sc.log.Error("gRPC client CA not reloaded; the last good one stays", "client_ca", sc.t.ClientCAFile, "err", err.Error())
	case changed:
		sc.log.Info("gRPC client CA reloaded", "client_ca", sc.t.ClientCAFile)
	}
}

// CertPoll is how often the certificate and client CA files are read
// besides their watch (for file systems that send no notifications).
const CertPoll = 10 * time.Second

// Watch reloads the certificate and the client CA when their files
// change, until ctx ends: it watches their directories (so that files
// renamed over them, and a Kubernetes Secret's ..data swap, are seen;
// events are debounced by 100ms) and reads them every CertPoll whatever
// the watch says.
func (sc *ServerCerts) Watch(ctx context.Context) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		sc.log.Warn("cannot watch the gRPC certificate files; they are read every "+CertPoll.String(), "err", err.Error())
	} else {
		defer w.Close()
		dirs := []string{filepath.Dir(sc.t.CertFile), filepath.Dir(sc.t.KeyFile)}
		if sc.base != nil {
			dirs = append(dirs, filepath.Dir(sc.t.ClientCAFile))
		}
		for _, d := range dirs {
			if err := w.Add(d); err != nil {
				sc.log.Warn("cannot watch the gRPC certificate directory; it is read every "+CertPoll.String(), "dir", d, "err", err.Error())
			}
		}
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		events, errs = w.Events, w.Errors
	}
	poll := time.NewTicker(CertPoll)
	defer poll.Stop()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			debounce.Reset(100 * time.Millisecond)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			sc.log.Warn("watching the gRPC certificate files", "err", err.Error())
		case <-debounce.C:
			sc.reload()
		case <-poll.C:
			sc.reload()
		}
	}
}
