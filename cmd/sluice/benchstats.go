package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"
)

// scriptStats is what the servers report for script calls (EVALSHA and
// EVAL, from INFO commandstats), summed over every node.
type scriptStats struct {
	calls int64
	usec  int64
}

// readScriptStats reads INFO commandstats from every node of client
// (nothing is reset: bench reports the difference of two reads).
func readScriptStats(ctx context.Context, client valkey.Client) (scriptStats, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var sum scriptStats
	for addr, c := range client.Nodes() {
		info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
		if err != nil {
			return scriptStats{}, fmt.Errorf("INFO commandstats from %s: %w", addr, err)
		}
		st, err := parseScriptStats(info)
		if err != nil {
			return scriptStats{}, fmt.Errorf("INFO commandstats from %s: %w", addr, err)
		}
		sum.calls += st.calls
		sum.usec += st.usec
	}
	return sum, nil
}

// parseScriptStats sums the calls and usec of the cmdstat_evalsha and
// cmdstat_eval lines of an INFO commandstats reply.
func parseScriptStats(info string) (scriptStats, error) {
	var st scriptStats
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || name != "cmdstat_evalsha" && name != "cmdstat_eval" {
			continue
		}
		n, err := parseCmdstat(name, fields)
		if err != nil {
			return scriptStats{}, err
		}
		st.calls += n.calls
		st.usec += n.usec
	}
	return st, nil
}

// counter is st's counter of the cmdstat field k (calls or usec); nil
// for another field.
func (st *scriptStats) counter(k string) *int64 {
	switch k {
	case "calls":
		return &st.calls
	case "usec":
		return &st.usec
	}
	return nil
}

// parseCmdstat reads the calls and usec of one cmdstat line's fields
// (calls=N,usec=N,...) of the command name; both must be there.
func parseCmdstat(name, fields string) (scriptStats, error) {
	var st scriptStats
	var seen int
	for _, f := range strings.Split(fields, ",") {
		k, v, _ := strings.Cut(f, "=")
		dst := st.counter(k)
		if dst == nil {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return scriptStats{}, fmt.Errorf("%s: malformed %s %q", name, k, v)
		}
		*dst += n
		seen++
	}
	if seen != 2 {
		return scriptStats{}, fmt.Errorf("%s: no calls and usec in %q", name, fields)
	}
	return st, nil
}
