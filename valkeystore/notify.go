package valkeystore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/sluicehq/sluice/driver"
)

// Delete notices (driver.DeleteNotifier), so that a reset made by any
// process reaches the deny cache of every limiter on the same prefix.
//
// DeleteNotify deletes the keys, then publishes each key with SPUBLISH on
// the prefix's channel, sluice:deletes:{<prefix>} (sharded pub/sub: on a
// cluster the channel lives in the slot of its hash tag, and SPUBLISH's
// reply counts the subscribers of that slot's primary, which is where
// every Store subscribes; standalone, the server's subscribers).
//
// A Store that has limiters watching a prefix keeps one subscription to
// its channel, on a dedicated connection, and sends a PING on it every
// heartbeatEvery. Valkey writes a connection's messages and replies in
// order, so a PONG proves that every notice published before its PING was
// sent has been delivered: the subscription counts as live until
// NoticeBound after the send of the last PING answered (and from the
// SSUBSCRIBE's confirmation), and the watchers are told Watching(false)
// when that passes, Watching(true) (drop everything: notices may have been
// missed) when it is live again. A subscription lost (the connection
// closed or killed, the slot moved away: sunsubscribe) is made again,
// with backoff, on a new connection. A user whose ACL denies the channel
// never subscribes (the caches stay unused) and DeleteNotify reports
// SPUBLISH's NOPERM after the keys are deleted.

// NoticeBound bounds the time from a DeleteNotify (a Limiter.Reset) on any
// Store to the moment every other Store subscribed to the prefix has
// delivered the notice to its limiters or told them it may have missed it
// (their deny caches then answer nothing): a deny cache never refuses a key
// from a refusal older than its reset for longer than this, plus the
// scheduling delay of a loaded host.
const NoticeBound = 500 * time.Millisecond

// heartbeatEvery is the time between two PINGs on a subscription.
const heartbeatEvery = 150 * time.Millisecond

// noticeChannel is the channel of prefix's delete notices.
func noticeChannel(prefix string) string { return "sluice:deletes:{" + prefix + "}" }

// watches are an engine's subscriptions, one per prefix watched.
type watches struct {
	mu sync.Mutex
	by map[string]*watch
}

// A watch is the subscription to one prefix's notices and its watchers.
type watch struct {
	e       *engine
	channel string
	stop    chan struct{}

	mu       sync.Mutex
	ws       map[*watcher]bool
	live     bool
	deadline time.Time   // live until then, short of a newer PONG
	timer    *time.Timer // fires at deadline
}

type watcher struct{ w driver.DeleteWatcher }

// WatchDeletes implements driver.DeleteNotifier: the first watcher of a
// prefix starts its subscription, the last one's stop ends it. w is told
// Watching(true) once the subscription is live (at once when it already
// is).
func (s *Store) WatchDeletes(prefix string, w driver.DeleteWatcher) (stop func()) {
	e := s.e
	e.watches.mu.Lock()
	defer e.watches.mu.Unlock()
	if e.watches.by == nil {
		e.watches.by = map[string]*watch{}
	}
	wt := e.watches.by[prefix]
	if wt == nil {
		wt = &watch{e: e, channel: noticeChannel(prefix), stop: make(chan struct{}), ws: map[*watcher]bool{}}
		wt.timer = time.AfterFunc(time.Hour, wt.expire)
		wt.timer.Stop()
		e.watches.by[prefix] = wt
		go wt.run()
	}
	x := &watcher{w}
	wt.mu.Lock()
	wt.ws[x] = true
	if wt.live {
		w.Watching(true)
	}
	wt.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			e.watches.mu.Lock()
			defer e.watches.mu.Unlock()
			wt.mu.Lock()
			delete(wt.ws, x)
			last := len(wt.ws) == 0
			wt.mu.Unlock()
			if last {
				delete(e.watches.by, prefix)
				close(wt.stop)
			}
		})
	}
}

// DeleteNotify implements driver.DeleteNotifier: Delete, then one SPUBLISH
// per key on prefix's channel. It returns the least number of subscribers
// any key's notice reached.
func (s *Store) DeleteNotify(ctx context.Context, prefix string, keys ...string) (int, error) {
	if err := s.Delete(ctx, keys...); err != nil {
		return 0, err
	}
	if len(keys) == 0 {
		return 0, nil
	}
	resps, err := s.e.publishNotices(ctx, noticeChannel(prefix), keys)
	if err != nil {
		return 0, err
	}
	return leastReached(resps)
}

// publishNotices SPUBLISHes each of keys on ch, through the breaker of
// ch's node, in one round trip.
func (e *engine) publishNotices(ctx context.Context, ch string, keys []string) ([]valkey.ValkeyResult, error) {
	cmds := make(valkey.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = e.client.B().Spublish().Channel(ch).Message(k).Build()
	}
	n := e.nodeOf(ch)
	dl, _ := ctx.Deadline()
	budget := budgetOf(dl)
	p, err := n.breaker.allow(budget)
	if err != nil {
		return nil, fmt.Errorf("valkeystore: delete notice: %w", err)
	}
	resps := n.guard.doMulti(ctx, e.client, cmds)
	n.breaker.record(ctx, p, budget, resps)
	return resps, nil
}

// leastReached is the least number of subscribers the SPUBLISH replies
// resps say a notice reached.
func leastReached(resps []valkey.ValkeyResult) (int, error) {
	least := -1
	for _, r := range resps {
		c, err := r.AsInt64()
		if err != nil {
			return 0, fmt.Errorf("valkeystore: delete notice (the keys are deleted): %w", err)
		}
		if least < 0 || int(c) < least {
			least = int(c)
		}
	}
	return least, nil
}

// run keeps the subscription until the last watcher stops or the Store is
// collected.
func (wt *watch) run() {
	defer wt.setLive(false, time.Time{})
	delay := 50 * time.Millisecond
	for {
		if wt.session() {
			delay = 50 * time.Millisecond
		}
		wt.setLive(false, time.Time{})
		select {
		case <-wt.stop:
			return
		case <-wt.e.done:
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// session subscribes on a dedicated connection and keeps the heartbeat
// until the subscription is lost or the watch ends. It reports whether it
// was live.
func (wt *watch) session() (wasLive bool) {
	d, release := wt.e.client.Dedicate()
	defer release()
	lost := make(chan struct{})
	var once sync.Once
	gone := func() { once.Do(func() { close(lost) }) }
	errc := d.SetPubSubHooks(wt.hooks(gone))
	if wt.ask(d, d.B().Ssubscribe().Channel(wt.channel).Build()) != nil {
		return false
	}
	wt.heartbeat(d, lost, errc)
	return true
}

// hooks delivers the notices of wt's channel, turns the watch live when
// the subscription starts, and calls gone when it ends.
func (wt *watch) hooks(gone func()) valkey.PubSubHooks {
	return valkey.PubSubHooks{
		OnMessage: func(m valkey.PubSubMessage) {
			if m.Channel == wt.channel {
				wt.deliver(m.Message)
			}
		},
		OnSubscription: func(s valkey.PubSubSubscription) { wt.subscription(s, gone) },
	}
}

func (wt *watch) subscription(s valkey.PubSubSubscription, gone func()) {
	if s.Channel != wt.channel {
		return
	}
	switch s.Kind {
	case "ssubscribe":
		// Every notice published from now on reaches this connection.
		wt.setLive(true, time.Now())
	case "sunsubscribe":
		gone() // the slot moved, or the server dropped it
	}
}

// ask sends cmd on d, bounded by NoticeBound.
func (wt *watch) ask(d valkey.DedicatedClient, cmd valkey.Completed) error {
	ctx, cancel := context.WithTimeout(context.Background(), NoticeBound)
	defer cancel()
	return d.Do(ctx, cmd).Error()
}

// heartbeat PINGs d every heartbeatEvery, each PONG renewing the proof
// of liveness, until a PING fails or waitTick says the session is over.
func (wt *watch) heartbeat(d valkey.DedicatedClient, lost <-chan struct{}, errc <-chan error) {
	tick := time.NewTicker(heartbeatEvery)
	defer tick.Stop()
	for wt.waitTick(tick, lost, errc) {
		sent := time.Now()
		if wt.ask(d, d.B().Ping().Build()) != nil {
			return
		}
		wt.setLive(true, sent)
	}
}

// waitTick waits for the next tick, and reports false instead when the
// watch ends first, or the subscription is lost, or the connection is gone
// (errc).
func (wt *watch) waitTick(tick *time.Ticker, lost <-chan struct{}, errc <-chan error) bool {
	select {
	case <-wt.stop:
	case <-wt.e.done:
	case <-lost:
	case <-errc:
	case <-tick.C:
		return true
	}
	return false
}

// setLive records a proof, at since, that every notice published before
// since was delivered (live), or that the subscription is gone.
func (wt *watch) setLive(live bool, since time.Time) {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	if live {
		wt.deadline = since.Add(NoticeBound)
		wt.timer.Reset(time.Until(wt.deadline))
	} else {
		wt.timer.Stop()
	}
	if live == wt.live {
		return
	}
	wt.live = live
	for x := range wt.ws {
		x.w.Watching(live)
	}
}

// expire ends the subscription's liveness when no PONG renewed it in time.
func (wt *watch) expire() {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	if !wt.live || time.Now().Before(wt.deadline) {
		return
	}
	wt.live = false
	for x := range wt.ws {
		x.w.Watching(false)
	}
}

func (wt *watch) deliver(key string) {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	for x := range wt.ws {
		x.w.Deleted(key)
	}
}
