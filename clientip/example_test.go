package clientip_test

import (
	"fmt"
	"net/http/httptest"

	"github.com/sluicehq/sluice/clientip"
)

// Behind a load balancer in 10.0.0.0/8 the client is the right-most
// X-Forwarded-For entry that is not a trusted proxy; whatever the client
// wrote further left is ignored. From any other peer the header is ignored.
func Example() {
	proxies, err := clientip.ParsePrefixes("10.0.0.0/8")
	if err != nil {
		panic(err)
	}
	r, err := clientip.New(clientip.Config{TrustedProxies: proxies})
	if err != nil {
		panic(err)
	}
	show := func(peer, xff string) {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = peer
		req.Header.Set("X-Forwarded-For", xff)
		fmt.Println(r.Key(req))
	}
	show("10.0.0.7:51000", "198.51.100.23")           // via the proxy
	show("10.0.0.7:51000", "6.6.6.6, 198.51.100.23")  // a lie on the left
	show("10.0.0.7:51000", "198.51.100.23, 10.0.0.9") // two proxies
	show("203.0.113.50:4711", "198.51.100.23")        // direct: spoofing ignored
	show("10.0.0.7:51000", "2001:db8:aa:bb:1:2:3:4")  // IPv6: grouped by /64
	show("[::ffff:203.0.113.50]:4711", "")            // IPv4-mapped: plain IPv4
	// Output:
	// 198.51.100.23
	// 198.51.100.23
	// 198.51.100.23
	// 203.0.113.50
	// 2001:db8:aa:bb::/64
	// 203.0.113.50
}

// With a hop count instead of addresses: the service is reachable only
// through one CDN and one load balancer, whose addresses change.
func ExampleConfig_trustedHops() {
	r := clientip.MustNew(clientip.Config{TrustedHops: 2})
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "192.0.2.10:80" // the load balancer
	req.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.23, 192.0.2.200")
	a, ok := r.Addr(req)
	fmt.Println(a, ok)
	// Output: 198.51.100.23 true
}
