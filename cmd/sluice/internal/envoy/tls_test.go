package envoy

import (
	"strings"
	"testing"
)

// TestGRPCTLSEnv: GRPC_SERVER_USE_TLS=true reads its files; without a
// certificate and key, or with GRPC_CLIENT_TLS_SAN but no client CA to
// ask for a certificate, it is refused by name; the files without it are
// said unused.
func TestGRPCTLSEnv(t *testing.T) {
	e, err := ReadEnv(mapEnv(envWith("GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", "/c.pem", "GRPC_SERVER_TLS_KEY", "/k.pem",
		"GRPC_CLIENT_TLS_CACERT", "/ca.pem", "GRPC_CLIENT_TLS_SAN", "envoy.local")))
	if err != nil {
		t.Fatal(err)
	}
	if g := e.GRPCTLS; g == nil || *g != (GRPCTLS{CertFile: "/c.pem", KeyFile: "/k.pem", ClientCAFile: "/ca.pem", ClientSAN: "envoy.local"}) {
		t.Errorf("GRPCTLS %+v", e.GRPCTLS)
	}
	for _, c := range []struct {
		kv   []string
		want string
	}{
		{[]string{"GRPC_SERVER_TLS_CERT", "/c.pem"}, "GRPC_SERVER_TLS_KEY"},
		{[]string{"GRPC_SERVER_TLS_CERT", "/c.pem", "GRPC_SERVER_TLS_KEY", "/k.pem", "GRPC_CLIENT_TLS_SAN", "x"}, "GRPC_CLIENT_TLS_CACERT"},
	} {
		if _, err := ReadEnv(mapEnv(envWith(append([]string{"GRPC_SERVER_USE_TLS", "true"}, c.kv...)...))); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.kv, err, c.want)
		}
	}
	e, err = ReadEnv(mapEnv(envWith("GRPC_SERVER_TLS_CERT", "/c.pem")))
	if err != nil || e.GRPCTLS != nil || !strings.Contains(strings.Join(e.Notes, " "), "GRPC_SERVER_TLS_CERT=/c.pem is not used") {
		t.Errorf("without GRPC_SERVER_USE_TLS: %+v %v", e, err)
	}
	// A file that does not load refuses the start.
	if _, _, err := (&GRPCTLS{CertFile: "/nonexistent.pem", KeyFile: "/nonexistent.key"}).ServerConfig(nil); err == nil || !strings.Contains(err.Error(), "GRPC_SERVER_TLS_CERT") {
		t.Errorf("missing files: %v", err)
	}
}
