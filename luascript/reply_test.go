package luascript

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/driver"
)

// record is one decision's record as batch.lua packs it, built here with
// encoding/binary rather than DecodeCall's own reading.
type record struct {
	allowed, status                                    byte
	remaining, retry, reset, receipt, ovLimit, ovParam int64
}

func (r record) bytes() string { return r.encode(0, 0) }

// penalized is r's bytes with the penalty's status (0 none, 1 blocked, 2
// blocked by this refusal).
func (r record) penalized(penalty byte) string { return r.encode(penalty, 0) }

// encode is r's bytes with the penalty's status and the count of leases
// reaped as expired.
func (r record) encode(penalty byte, expired int64) string {
	b := []byte{r.allowed, r.status, penalty}
	for _, v := range []int64{r.remaining, r.retry, r.reset, r.receipt, r.ovLimit, r.ovParam, expired} {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return string(b)
}

// TestDecodeExpired: the count of leases reaped as expired reads as
// Result.Expired, within 0 and driver.MaxInFlightLimit.
func TestDecodeExpired(t *testing.T) {
	const receipt = 1_764_000_000_123_456
	rec := record{1, 0, 3, 0, 30_000_000, receipt, 0, 0}
	for _, tc := range []struct {
		expired int64
		wantErr bool
	}{{0, false}, {1, false}, {driver.MaxInFlightLimit, false}, {-1, true}, {driver.MaxInFlightLimit + 1, true}} {
		var got driver.Result
		var gotErr error
		if err := DecodeCall(rec.encode(0, tc.expired), 1, func(_ int, res driver.Result, _ int64, err error) { got, gotErr = res, err }); err != nil {
			t.Fatal(err)
		}
		if (gotErr != nil) != tc.wantErr || !tc.wantErr && got.Expired != tc.expired {
			t.Errorf("expired %d: got %+v, %v; want an error %v", tc.expired, got, gotErr, tc.wantErr)
		}
		if !tc.wantErr && !errors.Is(gotErr, nil) || tc.wantErr && !errors.Is(gotErr, ErrReply) {
			t.Errorf("expired %d: error %v", tc.expired, gotErr)
		}
	}
}

func TestDecodeCall(t *testing.T) {
	const receipt = 1_764_000_000_123_456 // a time in microseconds: more than 2^50
	for _, tc := range []struct {
		name    string
		rec     record
		want    driver.Result
		wantErr error
	}{
		{"allowed", record{1, 0, 9, 0, 1500, receipt, 0, 0},
			driver.Result{Allowed: true, Remaining: 9, ResetAfter: 1500 * time.Microsecond}, nil},
		{"refused", record{0, 0, 0, 250_000, 3_000_000, receipt, 0, 0},
			driver.Result{RetryAfter: 250 * time.Millisecond, ResetAfter: 3 * time.Second}, nil},
		{"override applied", record{1, 1, 4, 0, 7, receipt, 500, 600_000_000},
			driver.Result{Allowed: true, Remaining: 4, ResetAfter: 7 * time.Microsecond, Override: true, OverrideLimit: 500, OverrideParam: 600_000_000}, nil},
		{"a parameter without an override", record{1, 0, 0, 0, 0, receipt, 0, 5}, driver.Result{}, ErrReply},
		{"negative parameter", record{1, 1, 0, 0, 0, receipt, 5, -1}, driver.Result{}, ErrReply},
		{"override malformed", record{1, 2, 4, 0, 7, receipt, 0, 0},
			driver.Result{Allowed: true, Remaining: 4, ResetAfter: 7 * time.Microsecond, OverrideInvalid: true}, nil},
		{"clock skew", record{2, 0, 0, 0, 0, 0, 0, 0}, driver.Result{}, driver.ErrClockSkew},
		{"allowed out of range", record{3, 0, 0, 0, 0, receipt, 0, 0}, driver.Result{}, ErrReply},
		{"negative remaining", record{1, 0, -1, 0, 0, receipt, 0, 0}, driver.Result{}, ErrReply},
		{"negative retry", record{0, 0, 0, -1, 0, receipt, 0, 0}, driver.Result{}, ErrReply},
		{"negative reset", record{1, 0, 0, 0, -1, receipt, 0, 0}, driver.Result{}, ErrReply},
		{"no receipt", record{1, 0, 0, 0, 0, 0, 0, 0}, driver.Result{}, ErrReply},
		{"status out of range", record{1, 3, 0, 0, 0, receipt, 0, 0}, driver.Result{}, ErrReply},
		{"applied without a limit", record{1, 1, 0, 0, 0, receipt, 0, 0}, driver.Result{}, ErrReply},
		{"a limit without an override", record{1, 0, 0, 0, 0, receipt, 5, 0}, driver.Result{}, ErrReply},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The record between two good ones: each is read at its own
			// offset.
			good := record{1, 0, 1, 0, 1, 1, 0, 0}
			reply := good.bytes() + tc.rec.bytes() + good.bytes()
			calls := 0
			err := DecodeCall(reply, 3, func(j int, res driver.Result, r int64, err error) {
				if j != calls {
					t.Fatalf("decision %d passed as %d", calls, j)
				}
				calls++
				if j != 1 {
					if err != nil || res != (driver.Result{Allowed: true, Remaining: 1, ResetAfter: time.Microsecond}) || r != 1 {
						t.Errorf("decision %d: %+v %d %v", j, res, r, err)
					}
					return
				}
				if !errors.Is(err, tc.wantErr) || res != tc.want {
					t.Errorf("got %+v %v, want %+v %v", res, err, tc.want, tc.wantErr)
				}
				if err == nil && r != receipt {
					t.Errorf("receipt %d, want %d", r, receipt)
				}
			})
			if err != nil || calls != 3 {
				t.Fatalf("DecodeCall: %v after %d decisions", err, calls)
			}
		})
	}
}

func TestDecodeCallLength(t *testing.T) {
	good := record{1, 0, 1, 0, 1, 1, 0, 0}.bytes()
	for _, tc := range []struct {
		reply string
		n     int
	}{
		{"", 1},
		{good, 2},
		{good + good, 1},
		{good[:RecordSize-1], 1},
		{good + "x", 1},
		{"x", 0},
	} {
		err := DecodeCall(tc.reply, tc.n, func(int, driver.Result, int64, error) {
			t.Fatalf("a decision passed from a reply of %d bytes for %d", len(tc.reply), tc.n)
		})
		if !errors.Is(err, ErrReply) {
			t.Errorf("%d bytes for %d decisions: %v, want ErrReply", len(tc.reply), tc.n, err)
		}
	}
	if err := DecodeCall("", 0, nil); err != nil {
		t.Errorf("an empty call: %v", err)
	}
}

// FuzzDecodeCall: any reply either decodes into exactly n decisions, each
// a Result within range or an error, or is refused whole; nothing panics.
func FuzzDecodeCall(f *testing.F) {
	f.Add(record{1, 0, 1, 0, 1, 1, 0, 0}.bytes(), 1)
	f.Add(record{2, 0, 0, 0, 0, 0, 0, 0}.bytes()+record{0, 1, 5, 9, 9, 3, 5, 0}.bytes(), 2)
	f.Add("", 0)
	f.Fuzz(func(t *testing.T, reply string, n int) {
		if n < 0 || n > 1000 {
			return
		}
		calls := 0
		err := DecodeCall(reply, n, func(j int, res driver.Result, receipt int64, err error) {
			calls++
			if err == nil && (res.Remaining < 0 || res.RetryAfter < 0 || res.ResetAfter < 0 || receipt <= 0 ||
				res.Override != (res.OverrideLimit > 0)) {
				t.Fatalf("decision %d out of range: %+v receipt %d", j, res, receipt)
			}
		})
		if (err == nil) != (len(reply) == n*RecordSize) {
			t.Fatalf("%d bytes for %d decisions: %v", len(reply), n, err)
		}
		if err == nil && calls != n || err != nil && calls != 0 {
			t.Fatalf("%d decisions passed for %d (%v)", calls, n, err)
		}
	})
}

// TestFillCall: a call's decisions land at their own indexes of the batch,
// the others untouched; a failed call, a reply that is not a string and a
// reply of the wrong length fail every decision of the call, named by
// store and algorithm; a record out of range fails only its own.
func TestFillCall(t *testing.T) {
	good := record{1, 0, 1, 0, 1, 7, 0, 0}
	bad := record{3, 0, 0, 0, 0, 7, 0, 0}
	idx := []int{3, 0}
	cause := errors.New("cause")
	for _, tc := range []struct {
		name              string
		reply             string
		callErr, replyErr error
		wantErr           [2]error // for idx[0], idx[1]
		wantText          string
	}{
		{"answered", good.bytes() + good.bytes(), nil, nil, [2]error{nil, nil}, ""},
		{"one record out of range", bad.bytes() + good.bytes(), nil, nil, [2]error{ErrReply, nil}, "store: gcra script: "},
		{"call failed", "", cause, nil, [2]error{cause, cause}, "store: gcra script: cause"},
		{"not a string", "", nil, cause, [2]error{cause, cause}, "store: gcra script: unexpected reply: cause"},
		{"wrong length", good.bytes(), nil, nil, [2]error{ErrReply, ErrReply}, "store: gcra script: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			batch := make([]driver.Op, 5)
			FillCall(batch, idx, "store", driver.AlgorithmGCRA, tc.reply, tc.callErr, tc.replyErr)
			for j, i := range idx {
				op := batch[i]
				if want := tc.wantErr[j]; want == nil {
					if op.Err != nil || op.Receipt != 7 || op.Result != (driver.Result{Allowed: true, Remaining: 1, ResetAfter: time.Microsecond}) {
						t.Errorf("batch[%d] = %+v", i, op)
					}
					continue
				} else if !errors.Is(op.Err, want) || !strings.HasPrefix(op.Err.Error(), tc.wantText) {
					t.Errorf("batch[%d].Err = %v, want %v starting %q", i, op.Err, want, tc.wantText)
				}
			}
			for _, i := range []int{1, 2, 4} {
				if batch[i] != (driver.Op{}) {
					t.Errorf("batch[%d], not in the call, was touched: %+v", i, batch[i])
				}
			}
		})
	}
}

// TestDecodePenalty: the penalty's status byte reads as Blocked and
// BlockStarted, and only on a refusal with nothing remaining and a retry.
func TestDecodePenalty(t *testing.T) {
	const receipt = 1_764_000_000_123_456
	blocked := record{0, 0, 0, 60_000_000, 60_000_000, receipt, 0, 0}
	for _, tc := range []struct {
		name    string
		rec     record
		penalty byte
		want    driver.Result
		wantErr bool
	}{
		{"blocked", blocked, 1, driver.Result{Blocked: true, RetryAfter: time.Minute, ResetAfter: time.Minute}, false},
		{"block started", blocked, 2, driver.Result{Blocked: true, BlockStarted: true, RetryAfter: time.Minute, ResetAfter: time.Minute}, false},
		{"status out of range", blocked, 3, driver.Result{}, true},
		{"blocked but allowed", record{1, 0, 0, 60_000_000, 60_000_000, receipt, 0, 0}, 1, driver.Result{}, true},
		{"blocked with units left", record{0, 0, 1, 60_000_000, 60_000_000, receipt, 0, 0}, 1, driver.Result{}, true},
		{"blocked without a retry", record{0, 0, 0, 0, 60_000_000, receipt, 0, 0}, 2, driver.Result{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got driver.Result
			var gotErr error
			if err := DecodeCall(tc.rec.penalized(tc.penalty), 1, func(_ int, res driver.Result, _ int64, err error) { got, gotErr = res, err }); err != nil {
				t.Fatal(err)
			}
			if (gotErr != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v, error %v", got, gotErr, tc.want, tc.wantErr)
			}
		})
	}
}

// TestDecodePenaltyState reads a penalty key's state as penalty.lua packs
// it ('<i8i8i8i8'), and refuses another length.
func TestDecodePenaltyState(t *testing.T) {
	var b []byte
	for _, v := range []int64{1_764_000_000_000_001, 2, 1_764_000_060_000_000, 3} {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	st, err := DecodePenalty(string(b))
	if err != nil || st != (PenaltyState{WindowStart: 1_764_000_000_000_001, Count: 2, Until: 1_764_000_060_000_000, Level: 3}) {
		t.Fatalf("%+v %v", st, err)
	}
	if _, err := DecodePenalty(string(b[:31])); err == nil {
		t.Fatal("31 bytes decoded")
	}
}
