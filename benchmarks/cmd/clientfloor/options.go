package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluicehq/sluice/benchmarks"
)

type options struct {
	addr       string
	conc       int
	keys       int
	maxKeys    int
	inflight   int
	duration   time.Duration
	rounds     int
	targets    []target
	cpuProfile string
}

// A target is a floor or a target of cmd/compare.
type target struct {
	label string
	open  func(addr string, o *options) (benchmarks.Decider, error)
}

// floorPrefix names the floors on the command line.
const (
	runtimeFloor = "floor-runtime"
	valkeyFloor  = "floor-valkey-go/"
	rawFloor     = "floor-raw/"
)

func parse(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("clientfloor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	var list string
	fs.StringVar(&o.addr, "addr", "", "a Valkey dedicated to the run (FLUSHALLed) instead of starting valkey-server")
	fs.IntVar(&o.conc, "conc", 128, "goroutines, each making one decision at a time")
	fs.IntVar(&o.keys, "keys", 100_000, "keys, each prepared (one decision, checked allowed) before timing")
	fs.IntVar(&o.maxKeys, "max-keys", 16, "the floors' keys per call at most")
	fs.IntVar(&o.inflight, "inflight", 4, "the floors' calls in flight (workers)")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "each timed run")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds, the targets alternating")
	fs.StringVar(&list, "targets", "floor-runtime,floor-raw/gcra,floor-valkey-go/gcra,sluice/gcra,valkeylimiter",
		"floor-runtime, floor-valkey-go/<algorithm>, floor-raw/<algorithm>, and targets of cmd/compare, a comma list")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the timed runs (all targets) to this file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if o.conc < 1 || o.keys < 1 || o.maxKeys < 1 || o.inflight < 1 || o.duration <= 0 || o.rounds < 1 {
		return nil, errors.New("-conc, -keys, -max-keys, -inflight, -duration and -rounds must be positive")
	}
	var err error
	if o.targets, err = parseTargets(list); err != nil {
		return nil, err
	}
	return o, nil
}

func parseTargets(list string) ([]target, error) {
	var out []target
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
		case name == runtimeFloor:
			out = append(out, target{label: name, open: func(_ string, o *options) (benchmarks.Decider, error) {
				rule, err := benchmarks.SluiceRule("gcra", benchmarks.Spread)
				if err != nil {
					return nil, err
				}
				return openRuntimeFloor(rule, o.maxKeys, o.inflight), nil
			}})
		case strings.HasPrefix(name, valkeyFloor), strings.HasPrefix(name, rawFloor):
			open := openValkeyFloor
			alg, raw := strings.CutPrefix(name, rawFloor)
			if raw {
				open = openRawFloor
			} else {
				alg = strings.TrimPrefix(name, valkeyFloor)
			}
			if _, err := benchmarks.SluiceRule(alg, benchmarks.Spread); err != nil {
				return nil, fmt.Errorf("target %q: %w", name, err)
			}
			out = append(out, target{label: name, open: func(addr string, o *options) (benchmarks.Decider, error) {
				rule, err := benchmarks.SluiceRule(alg, benchmarks.Spread)
				if err != nil {
					return nil, err
				}
				return open(addr, rule, o.maxKeys, o.inflight)
			}})
		default:
			ts, err := benchmarks.Targets(name)
			if err != nil {
				return nil, fmt.Errorf("%w, or %s, %s<algorithm>, %s<algorithm>", err, runtimeFloor, valkeyFloor, rawFloor)
			}
			for _, t := range ts {
				out = append(out, target{label: t.Name + "/" + t.Algorithm, open: func(addr string, _ *options) (benchmarks.Decider, error) {
					return t.Open(benchmarks.Config{Addr: addr, Profile: benchmarks.Spread, SluiceTimeout: time.Second})
				}})
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no target")
	}
	return out, nil
}
