package main

// The binary carries what it would otherwise read from /etc, so it runs in an
// empty container image (FROM scratch) with no environment:
//
//   - time/tzdata: the time zone database, used when the system has none
//     (TZ=Europe/Berlin works in an image without /usr/share/zoneinfo).
//   - x509roots/fallback: Mozilla's root certificates, used only when the
//     system has no roots of its own (valkey.tls: true in an image without
//     /etc/ssl). Roots installed on the system still win.
//
// deploy's tests run the statically built binary in an empty root directory
// with an empty environment and check both.
import (
	_ "time/tzdata"

	_ "golang.org/x/crypto/x509roots/fallback"
)
