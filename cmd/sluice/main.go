// Command sluice is Sluice's service and operator tool: sluice serve answers
// rate-limit decisions over HTTP JSON and Envoy's gRPC protocol;
// sluice validate-config checks a configuration file.
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}
