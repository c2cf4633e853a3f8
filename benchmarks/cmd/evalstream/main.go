// Command evalstream writes, as RESP on stdout, the script calls valkeystore
// sends for GCRA decisions, without valkeystore: -calls EVALSHA calls of
// -keys decisions each, keys drawn from 100k, built with luascript (the
// scripts' one writer of their arguments), for a client with no Sluice
// code in it to send (valkey-cli --pipe). With -load it writes instead the
// SCRIPT LOAD of both forms of the GCRA script, with -warm one call per
// -keys keys of the 100k, in order, so that every key exists, and with
// -records only the records of one call (the last argument of every call,
// raw: for valkey-benchmark -x).
//
// -form one is a call of keys declared in KEYS (what valkeystore sends to a
// server, and to a cluster node for keys of one slot); -form cross is the
// Cross script with its keys in ARGV (what it sends to a cluster node for
// keys of several slots). -tags N draws keys of N hash tags (1: one slot),
// 0 of random slots; -slots LO-HI keeps only keys whose slot is in
// [LO, HI] (the keys a primary of a cluster serves).
// benchmarks/cluster-servercost.sh sends these streams to one server and to
// cluster nodes.
//
//	evalstream -form cross -calls 50000 -keys 16 >calls.resp
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/luascript"
	"github.com/sluicehq/sluice/valkeytest"
)

const keySpace = 100_000

func main() {
	form := flag.String("form", "one", "one: keys in KEYS; cross: the Cross script, keys in ARGV")
	calls := flag.Int("calls", 50_000, "script calls")
	perCall := flag.Int("keys", 16, "decisions per call")
	tags := flag.Int("tags", 0, "keys of this many hash tags (0: of random slots)")
	slots := flag.String("slots", "", "LO-HI: only keys of these slots")
	interval := flag.Duration("interval", time.Microsecond, "the GCRA interval: 1µs lets keys expire about a second after their last take, 2s keeps every key for the run")
	load := flag.Bool("load", false, "write SCRIPT LOAD of the GCRA script's two forms instead")
	warm := flag.Bool("warm", false, "write one call per -keys keys of the key space, in order, instead")
	records := flag.Bool("records", false, "write only the records of one call, raw, instead")
	seed := flag.Uint64("seed", 1, "the random keys' seed")
	flag.Parse()
	w := bufio.NewWriterSize(os.Stdout, 1<<20)
	if *records {
		if *perCall < 1 {
			fmt.Fprintln(os.Stderr, "evalstream: -keys must be positive")
			os.Exit(2)
		}
		w.Write(callRecords(*perCall, *interval))
	} else if err := run(w, *form, *calls, *perCall, *tags, *slots, *interval, *load, *warm, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "evalstream:", err)
		os.Exit(2)
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "evalstream:", err)
		os.Exit(1)
	}
}

func run(w *bufio.Writer, form string, calls, perCall, tags int, slots string, interval time.Duration, load, warm bool, seed uint64) error {
	sc := luascript.For(driver.AlgorithmGCRA)
	if load {
		writeCommand(w, "SCRIPT", "LOAD", sc.Src)
		writeCommand(w, "SCRIPT", "LOAD", sc.Cross.Src)
		return nil
	}
	if form != "one" && form != "cross" {
		return fmt.Errorf("-form %q: one or cross", form)
	}
	if calls < 1 || perCall < 1 || tags < 0 {
		return fmt.Errorf("-calls and -keys must be positive and -tags not negative")
	}
	lo, hi := 0, 16383
	if slots != "" {
		var err error
		if lo, hi, err = slotRange(slots); err != nil {
			return err
		}
	}
	key := func(i int) string {
		if tags > 0 {
			return "callcost:{" + strconv.Itoa(i%tags) + "}:" + strconv.Itoa(i)
		}
		return "callcost:" + strconv.Itoa(i)
	}
	var space []string // the keys of the slots asked for
	for i := range keySpace {
		if k := key(i); slots == "" || inRange(valkeytest.Slot(k), lo, hi) {
			space = append(space, k)
		}
	}
	if len(space) == 0 {
		return fmt.Errorf("no key of the %d falls in slots %s", keySpace, slots)
	}
	rec := string(callRecords(perCall, interval))
	rng := rand.New(rand.NewPCG(seed, 0))
	args := make([]string, 0, 4+perCall)
	if warm {
		calls = (len(space) + perCall - 1) / perCall
	}
	for c := range calls {
		keys := make([]string, perCall)
		for j := range keys {
			if warm {
				keys[j] = space[(c*perCall+j)%len(space)]
			} else {
				keys[j] = space[rng.IntN(len(space))]
			}
		}
		args = args[:0]
		if form == "one" {
			args = append(args, "EVALSHA", sc.SHA, strconv.Itoa(perCall))
			args = append(args, keys...)
		} else {
			// As valkeystore's command() writes a cross call: no declared
			// key; the numbers of keys and of decisions, the keys, the
			// records.
			args = append(args, "EVALSHA", sc.Cross.SHA, "0", strconv.Itoa(perCall), strconv.Itoa(perCall))
			args = append(args, keys...)
		}
		args = append(args, rec)
		writeCommand(w, args...)
	}
	return nil
}

// callRecords returns the records of a call of n decisions (its last
// argument): each takes 1 of a GCRA rule of 1,000,000 per interval, at the
// server's TIME.
func callRecords(n int, interval time.Duration) []byte {
	rule := sluice.Rule{Algorithm: driver.AlgorithmGCRA, Limit: 1_000_000, Interval: interval}
	op := driver.Op{Rule: rule, Cost: 1} // Now zero: the server's TIME decides
	var rec []byte
	for range n {
		rec = luascript.AppendArgs(rec, &op, 0, 0, time.Time{})
	}
	return rec
}

// writeCommand writes a command as a RESP array of bulk strings.
func writeCommand(w *bufio.Writer, args ...string) {
	w.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		w.WriteString("$" + strconv.Itoa(len(a)) + "\r\n")
		w.WriteString(a)
		w.WriteString("\r\n")
	}
}

func slotRange(s string) (lo, hi int, err error) {
	var n int
	if n, err = fmt.Sscanf(s, "%d-%d", &lo, &hi); err != nil || n != 2 || lo < 0 || hi > 16383 || lo > hi {
		return 0, 0, fmt.Errorf("-slots %q: LO-HI within 0-16383", s)
	}
	return lo, hi, nil
}

func inRange(s, lo, hi int) bool { return s >= lo && s <= hi }
