package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/benchmarks"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/luascript"
)

// The floors share one structure with Sluice's batching: every caller
// blocks on its own decision; a few workers (the calls in flight) each
// take the first request waiting, and with it whatever else is already
// waiting, up to a call's worth of keys, decide them at once and wake
// their callers. Nothing else: no deadline, no breaker, no metrics, no
// fail mode, no validation. A lone decision never waits for company.
//
// The runtime floor decides without the network (every decision allowed,
// as if Valkey answered at once): what is left is the Go runtime's cost
// of parking and waking each caller. The valkey-go floor sends each batch
// as one EVALSHA of Sluice's script through valkey-go, its arguments
// built by luascript as valkeystore builds them, and decodes the reply
// with luascript.DecodeCall: the cheapest client Sluice's design can have
// on valkey-go.

// request is one caller's decision, from the caller to a worker and back.
type request struct {
	key     []byte // the store key, in a buffer kept with the request
	allowed bool
	err     error
	done    chan struct{} // room for the answer: a worker never blocks on it
}

var requestPool = sync.Pool{New: func() any { return &request{done: make(chan struct{}, 1)} }}

// decideFunc decides a batch, filling in each request's allowed or err.
// Each worker has its own, so that it may reuse buffers between calls.
type decideFunc func(batch []*request)

// floor is a Decider: callers hand their requests to workers through one
// channel, and wait on their own.
type floor struct {
	reqs    chan *request
	maxKeys int
	prefix  string // of the store keys, as driver.AppendKey builds them
	name    string
	rule    sluice.Rule
	sends   bool // one EVALSHA per batch: the server counts them
	wg      sync.WaitGroup
	close   func()

	calls     atomic.Int64 // batches decided
	decisions atomic.Int64 // requests answered
}

// newFloor starts one worker per decide function.
func newFloor(prefix, name string, rule sluice.Rule, maxKeys int, workers []decideFunc, closeFn func()) *floor {
	f := &floor{reqs: make(chan *request, 1024), maxKeys: maxKeys, prefix: prefix, name: name, rule: rule, close: closeFn}
	for _, d := range workers {
		f.wg.Add(1)
		go f.work(d)
	}
	return f
}

// Allow hands one decision to the workers and waits for its answer.
func (f *floor) Allow(_ context.Context, id string) (benchmarks.Outcome, error) {
	r := requestPool.Get().(*request)
	r.key = driver.AppendKey(r.key[:0], f.prefix, f.name, f.rule, id)
	f.reqs <- r
	<-r.done
	out, err := benchmarks.Denied, r.err
	if r.allowed {
		out = benchmarks.Allowed
	}
	r.allowed, r.err = false, nil
	requestPool.Put(r)
	return out, err
}

// work decides batches until the floor is closed: the first request
// waiting (it blocks for one), then those already waiting, up to maxKeys.
func (f *floor) work(decide decideFunc) {
	defer f.wg.Done()
	batch := make([]*request, 0, f.maxKeys)
	for r := range f.reqs {
		batch = append(batch[:0], r)
	gather:
		for len(batch) < f.maxKeys {
			select {
			case r, ok := <-f.reqs:
				if !ok {
					break gather
				}
				batch = append(batch, r)
			default:
				break gather
			}
		}
		decide(batch)
		f.calls.Add(1)
		f.decisions.Add(int64(len(batch)))
		for _, r := range batch {
			r.done <- struct{}{}
		}
		clear(batch)
	}
}

// Close stops the workers; no Allow may be running or follow.
func (f *floor) Close() {
	close(f.reqs)
	f.wg.Wait()
	if f.close != nil {
		f.close()
	}
}

// counts returns the batches decided and the decisions answered so far.
func (f *floor) counts() (calls, decisions int64) {
	return f.calls.Load(), f.decisions.Load()
}

// openRuntimeFloor is the floor without the network: every decision is
// allowed the moment a worker takes it.
func openRuntimeFloor(rule sluice.Rule, maxKeys, workers int) *floor {
	ds := make([]decideFunc, workers)
	for i := range ds {
		ds[i] = func(batch []*request) {
			for _, r := range batch {
				r.allowed = true
			}
		}
	}
	return newFloor("floor-runtime", "bench", rule, maxKeys, ds, nil)
}

// openValkeyFloor is the floor on valkey-go: each batch one EVALSHA of
// rule's script (loaded first), on its own client with the options of
// every valkey-go target.
func openValkeyFloor(addr string, rule sluice.Rule, maxKeys, workers int) (*floor, error) {
	sc := luascript.ForRule(&rule)
	if sc == nil {
		return nil, errors.New("clientfloor: no script for " + rule.Algorithm.String())
	}
	client, err := benchmarks.NewValkeyClient(addr)
	if err != nil {
		return nil, err
	}
	if err := client.Do(context.Background(), client.B().ScriptLoad().Script(sc.Src).Build()).Error(); err != nil {
		client.Close()
		return nil, err
	}
	op := driver.Op{Rule: rule, Cost: 1} // Now zero: the server's TIME decides
	ds := make([]decideFunc, workers)
	for i := range ds {
		keys := make([]string, 0, maxKeys)
		var recs []byte
		ds[i] = func(batch []*request) {
			keys, recs = keys[:0], recs[:0]
			for _, r := range batch {
				// The request's key buffer and recs are not touched again
				// before Do returns, and valkey-go keeps no command after.
				keys = append(keys, unsafe.String(unsafe.SliceData(r.key), len(r.key)))
				recs = luascript.AppendArgs(recs, &op, 0, 0, time.Time{})
			}
			cmd := client.B().Evalsha().Sha1(sc.SHA).Numkeys(int64(len(keys))).Key(keys...).
				Arg(unsafe.String(unsafe.SliceData(recs), len(recs))).Build()
			reply, err := client.Do(context.Background(), cmd).ToString()
			settle(batch, reply, err)
		}
	}
	f := newFloor("floor-valkey-go", "bench", rule, maxKeys, ds, client.Close)
	f.sends = true
	return f, nil
}

// settle gives each request of batch its decision from the reply of the
// call that decided them, or the call's error.
func settle(batch []*request, reply string, err error) {
	if err == nil {
		err = luascript.DecodeCall(reply, len(batch), func(j int, res driver.Result, _ int64, err error) {
			batch[j].allowed, batch[j].err = res.Allowed, err
		})
	}
	if err != nil {
		for _, r := range batch {
			r.allowed, r.err = false, err
		}
	}
}

// openRawFloor is the floor without a client library: each worker has a
// connection of its own, writes its batch's EVALSHA as RESP and reads the
// reply on its own goroutine, as valkey-benchmark's connections do; the
// arguments and the reply as for openValkeyFloor.
func openRawFloor(addr string, rule sluice.Rule, maxKeys, workers int) (*floor, error) {
	sc := luascript.ForRule(&rule)
	if sc == nil {
		return nil, errors.New("clientfloor: no script for " + rule.Algorithm.String())
	}
	var conns []*rawConn
	closeAll := func() {
		for _, c := range conns {
			c.conn.Close()
		}
	}
	for range workers {
		c, err := dialRaw(addr)
		if err != nil {
			closeAll()
			return nil, err
		}
		conns = append(conns, c)
	}
	if _, err := conns[0].call("SCRIPT", "LOAD", sc.Src); err != nil {
		closeAll()
		return nil, err
	}
	op := driver.Op{Rule: rule, Cost: 1}
	ds := make([]decideFunc, workers)
	for i, c := range conns {
		args := make([]string, 0, 4+maxKeys)
		var recs []byte
		ds[i] = func(batch []*request) {
			args = append(args[:0], "EVALSHA", sc.SHA, strconv.Itoa(len(batch)))
			recs = recs[:0]
			for _, r := range batch {
				args = append(args, unsafe.String(unsafe.SliceData(r.key), len(r.key)))
				recs = luascript.AppendArgs(recs, &op, 0, 0, time.Time{})
			}
			args = append(args, unsafe.String(unsafe.SliceData(recs), len(recs)))
			reply, err := c.call(args...)
			settle(batch, reply, err)
		}
	}
	f := newFloor("floor-raw", "bench", rule, maxKeys, ds, closeAll)
	f.sends = true
	return f, nil
}

// rawConn is one connection to Valkey speaking just enough RESP for a
// script call: a command of bulk strings out, a bulk string or an error
// back.
type rawConn struct {
	conn net.Conn
	w    *bufio.Writer
	r    *bufio.Reader
	line []byte
}

func dialRaw(addr string) (*rawConn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &rawConn{conn: c, w: bufio.NewWriterSize(c, 16<<10), r: bufio.NewReaderSize(c, 16<<10)}, nil
}

// call sends one command and returns its bulk-string reply; an error
// reply is an error.
func (c *rawConn) call(args ...string) (string, error) {
	c.line = append(strconv.AppendInt(append(c.line[:0], '*'), int64(len(args)), 10), '\r', '\n')
	c.w.Write(c.line)
	for _, a := range args {
		c.line = append(strconv.AppendInt(append(c.line[:0], '$'), int64(len(a)), 10), '\r', '\n')
		c.w.Write(c.line)
		c.w.WriteString(a)
		c.w.WriteString("\r\n")
	}
	if err := c.w.Flush(); err != nil {
		return "", err
	}
	head, err := c.r.ReadSlice('\n')
	if err != nil {
		return "", err
	}
	if len(head) < 3 || head[len(head)-2] != '\r' {
		return "", fmt.Errorf("clientfloor: bad reply line %q", head)
	}
	switch head[0] {
	case '-':
		return "", errors.New(string(head[1 : len(head)-2]))
	case '$':
		n, err := strconv.Atoi(string(head[1 : len(head)-2]))
		if err != nil || n < 0 {
			return "", fmt.Errorf("clientfloor: bad bulk string length %q", head)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return "", err
		}
		return unsafe.String(unsafe.SliceData(buf), n), nil
	}
	return "", fmt.Errorf("clientfloor: unexpected reply %q", head)
}
