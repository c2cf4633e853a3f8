package doctor

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The judgements that need a server in a state the tests cannot easily
// start (an old version, a lagging replica, a skewed clock), on the fields
// doctor reads.

func judge(f func(d *doc)) []*Finding {
	d := &doc{rep: &Report{}, risked: map[string]bool{}}
	f(d)
	return d.rep.Findings
}

func one(t *testing.T, fs []*Finding, check string, sev Severity, msg string) {
	t.Helper()
	for _, f := range fs {
		if f.Check == check {
			if f.Severity != sev || !strings.Contains(f.Message, msg) {
				t.Errorf("%s: %v %q; want %v with %q", check, f.Severity, f.Message, sev, msg)
			}
			if sev >= Warning && f.Fix == "" {
				t.Errorf("%s: %v without a fix", check, sev)
			}
			return
		}
	}
	t.Errorf("no %s finding in %+v", check, fs)
}

func TestVersionOf(t *testing.T) {
	one(t, judge(func(d *doc) { d.versionOf("a", map[string]string{"redis_version": "6.2.14"}) }), "version", Error, "redis 6.2.14: Sluice's scripts need")
	one(t, judge(func(d *doc) { d.versionOf("a", map[string]string{"redis_version": "7.2.4"}) }), "version", OK, "redis 7.2.4")
	one(t, judge(func(d *doc) { d.versionOf("a", map[string]string{"valkey_version": "8.0.1", "redis_version": "7.2.4"}) }), "version", OK, "valkey 8.0.1")
}

func TestReplicationOf(t *testing.T) {
	lagging := map[string]string{"connected_slaves": "2", "slave0": "ip=10.0.0.2,port=6379,state=online,offset=100,lag=0", "slave1": "ip=10.0.0.3,port=6379,state=online,offset=90,lag=7"}
	fs := judge(func(d *doc) { d.replicationOf("a", lagging, "0", nil) })
	one(t, fs, "replication lag", Warning, "a replica lags 7s behind")
	one(t, fs, "min-replicas-to-write", Info, "min-replicas-to-write 0: a failover may lose")
	fs = judge(func(d *doc) {
		d.replicationOf("a", map[string]string{"connected_slaves": "1", "slave0": "ip=x,port=1,state=online,offset=1,lag=1"}, "2", nil)
	})
	one(t, fs, "replication lag", OK, "1 replicas, lag at most 1s")
	one(t, fs, "min-replicas-to-write", Error, "min-replicas-to-write 2 with 1 replicas connected: every write (every decision) is refused")
	fs = judge(func(d *doc) {
		d.replicationOf("a", map[string]string{"connected_slaves": "0"}, "", errors.New("NOPERM"))
	})
	one(t, fs, "replication", Info, "no replica")
	one(t, fs, "min-replicas-to-write", Unknown, "could not check")
}

func TestClockOf(t *testing.T) {
	t1 := time.Unix(1_000_000, 0)
	t2 := t1.Add(2 * time.Millisecond)
	one(t, judge(func(d *doc) { d.clockOf("a", t1, t2, t1.Add(time.Millisecond+3*time.Second)) }), "clock", Warning, "the server's clock is 3s off this host's (±1ms)")
	one(t, judge(func(d *doc) { d.clockOf("a", t1, t2, t1.Add(time.Millisecond-2*time.Second)) }), "clock", Warning, "-2s off")
	one(t, judge(func(d *doc) { d.clockOf("a", t1, t2, t1.Add(time.Millisecond+20*time.Millisecond)) }), "clock", OK, "skew 20ms (±1ms)")
}
