// Package memcached is Sluice's compatibility harness's stand-in for
// envoyproxy/ratelimit's memcache backend (not upstream's code): upstream's
// integration tests set AutoFlushForIntegrationTests. Sluice has no
// memcache backend (BACKEND_TYPE=memcache is refused at start), so the
// harness counts the memcache cases as not applicable.
package memcached

// AutoFlushForIntegrationTests is set by upstream's tests; nothing reads it.
var AutoFlushForIntegrationTests bool
