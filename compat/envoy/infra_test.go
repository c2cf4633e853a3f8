package envoy_test

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The fleet upstream's Makefile (tests_with_redis, bootstrap_redis_tls)
// starts before its integration tests, on the same fixed ports: Valkey with
// password123 behind TLS (upstream: stunnel; here Valkey's own TLS port),
// two Sentinel groups (mymaster) and two 3-node Clusters. The suite itself
// starts the plain servers it needs (test/common's WithMultiRedis, run as
// redis-server, a link to valkey-server).

// require fails the test, saying how to install it, when a tool is missing.
func require(t *testing.T, tool, install string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		t.Fatalf("%s is not installed: %s", tool, install)
	}
	return p
}

// lockPorts serializes runs of the harness on this machine: upstream's
// suite uses fixed ports.
func lockPorts(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "sluice-compat-envoy.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
}

// freeOf fails when one of ports is taken by another program.
func freeOf(t *testing.T, ports ...int) {
	t.Helper()
	for _, p := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d, which upstream's suite uses, is taken: %v (stop what listens there)", p, err)
		}
		l.Close()
	}
}

// valkey starts valkey-server with args in a directory of its own and
// waits for port to accept connections.
func valkey(t *testing.T, port int, args ...string) {
	t.Helper()
	dir := t.TempDir()
	args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1 ::1", "--save", "", "--appendonly", "no", "--dir", dir}, args...)
	cmd := exec.Command("valkey-server", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	waitPort(t, port, done, &out)
}

func waitPort(t *testing.T, port int, done chan struct{}, out *bytes.Buffer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			t.Fatalf("valkey-server on %d exited:\n%s", port, out.String())
		default:
		}
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 100*time.Millisecond); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("valkey-server on %d did not open its port:\n%s", port, out.String())
}

// cli runs valkey-cli.
func cli(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("valkey-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("valkey-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// certs writes the self-signed localhost certificate upstream's Makefile
// makes with openssl (cert.pem, key.pem) into dir.
func certs(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	pk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost", Organization: []string{"Dis"}},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &pk.PublicKey, pk)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writePEM(t, cert, "CERTIFICATE", der)
	writePEM(t, key, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(pk))
	return cert, key
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// fleetPorts are the ports the Makefile's servers take.
var fleetPorts = []int{6381, 6382, 6361, 16381, 16382, 16361, 6392, 6393, 26394, 26395, 26396, 6397, 6398, 26399, 26400, 26401,
	6386, 6387, 6388, 6389, 6390, 6391}

// startFleet starts the Makefile's servers; projectDir gets cert.pem and
// key.pem (PROJECT_DIR).
func startFleet(t *testing.T, projectDir, upstream string) {
	t.Helper()
	cert, key := certs(t, projectDir)
	tls := func(tlsPort int, verify bool) []string {
		a := []string{"--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", cert, "--tls-key-file", key, "--tls-auth-clients", "no"}
		if verify {
			a = append(a[:len(a)-1], "yes", "--tls-ca-cert-file", cert)
		}
		return a
	}
	pass := []string{"--requirepass", "password123"}
	valkey(t, 6381, append(pass, tls(16381, false)...)...)
	valkey(t, 6382, append(pass, tls(16382, false)...)...)
	valkey(t, 6361, append(pass, tls(16361, true)...)...)
	waitPort(t, 16381, nil, &bytes.Buffer{})
	sentinelGroup(t, 6392, 6393, []int{26394, 26395, 26396}, filepath.Join(upstream, "test/integration/conf/sentinel.conf"))
	sentinelGroup(t, 6397, 6398, []int{26399, 26400, 26401}, filepath.Join(upstream, "test/integration/conf/sentinel-pre-second.conf"))
	cluster(t, 6386, 6387, 6388)
	cluster(t, 6389, 6390, 6391)
}

// sentinelGroup is a primary with password123, its replica, and Sentinels
// started from upstream's sentinel configuration.
func sentinelGroup(t *testing.T, primary, replica int, sentinels []int, conf string) {
	t.Helper()
	valkey(t, primary, "--requirepass", "password123")
	valkey(t, replica, "--requirepass", "password123", "--replicaof", "127.0.0.1", strconv.Itoa(primary), "--masterauth", "password123")
	data, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range sentinels {
		f := filepath.Join(t.TempDir(), "sentinel.conf")
		if err := os.WriteFile(f, data, 0o600); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Dir(f)
		cmd := exec.Command("valkey-server", f, "--sentinel", "--port", strconv.Itoa(p), "--dir", dir)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		t.Cleanup(func() { cmd.Process.Kill(); <-done })
		waitPort(t, p, done, &out)
	}
}

// cluster is a Cluster of three primaries with password123, made with
// valkey-cli --cluster create as the Makefile does.
func cluster(t *testing.T, ports ...int) {
	t.Helper()
	var addrs []string
	for _, p := range ports {
		valkey(t, p, "--cluster-enabled", "yes", "--requirepass", "password123")
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(p))
	}
	cli(t, append(append([]string{"--cluster", "create"}, addrs...), "-a", "password123", "--cluster-replicas", "0", "--cluster-yes")...)
	deadline := time.Now().Add(15 * time.Second)
	for {
		out := cli(t, "-p", strconv.Itoa(ports[0]), "-a", "password123", "--no-auth-warning", "cluster", "info")
		if strings.Contains(out, "cluster_state:ok") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster %v not ok:\n%s", ports, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// redisServerLink makes a directory holding redis-server, a link to
// valkey-server (upstream's suite runs redis-server).
func redisServerLink(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	vs := require(t, "valkey-server", "bash scripts/install-valkey.sh")
	if err := os.Symlink(vs, filepath.Join(dir, "redis-server")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// built is the sluice binary, built once for the package's tests.
var built struct {
	once sync.Once
	bin  string
	err  error
}

// buildSluice builds the sluice binary from the work tree (or takes
// SLUICE_BIN's, to compare another build).
func buildSluice(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("SLUICE_BIN"); bin != "" {
		return bin
	}
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-compat-")
		if err != nil {
			built.err = err
			return
		}
		built.bin = filepath.Join(dir, "sluice")
		cmd := exec.Command("go", "build", "-o", built.bin, ".")
		cmd.Dir = filepath.Join("..", "..", "cmd", "sluice")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("building sluice: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.bin != "" {
		os.RemoveAll(filepath.Dir(built.bin))
	}
	os.Exit(code)
}

// copyTree copies the directory src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(fmt.Errorf("copying %s: %w", src, err))
	}
}
