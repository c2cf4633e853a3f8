package valkeystore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/sluicehq/sluice/driver"
)

// Key overrides (driver.OverrideStore). An override is a hash under its
// key (limit, param and until, which the scripts read in the decision's
// call; info and id, for listing), expiring after until - set of Valkey's
// time (PEXPIRE; at until by PEXPIREAT when the record has no set time),
// so that an override set under the limiter's own clock lives as long as
// that clock says rather than by Valkey's. The index is a sorted set of
// identities scored by their expiry, trimmed of those lapsed by the
// writer's clock at every write, so it holds no more than the live
// overrides and those lapsed since the last write. The index and the hash
// are in different slots: a put writes the hash first, and a list skips
// an identity whose hash is gone. Whether a record read has lapsed is the
// reader's to say, by its clock (sluice.Limiter.GetOverride).

// PutOverride implements driver.OverrideStore.
func (s *Store) PutOverride(ctx context.Context, index, key string, rec driver.OverrideRecord) error {
	if err := driver.CheckRecord(rec); err != nil {
		return fmt.Errorf("valkeystore: put override: %w", err)
	}
	c := s.e.client
	until := rec.Expires.UnixMicro()
	set := rec.Set
	if set.IsZero() {
		set = time.Now()
	}
	// The record's life in milliseconds of Valkey's time, rounded up.
	life := (until - set.UnixMicro() + 999) / 1000
	hash := c.DoMulti(ctx,
		c.B().Hset().Key(key).FieldValue().
			FieldValue("limit", strconv.FormatInt(rec.Limit, 10)).
			FieldValue("param", strconv.FormatInt(rec.Param, 10)).
			FieldValue("until", strconv.FormatInt(until, 10)).
			FieldValue("info", rec.Info).
			FieldValue("id", rec.Identity).Build(),
		c.B().Pexpire().Key(key).Milliseconds(life).Build())
	for _, r := range hash {
		if err := r.Error(); err != nil {
			return fmt.Errorf("valkeystore: put override: %w", err)
		}
	}
	now := strconv.FormatInt(set.UnixMicro(), 10)
	for _, r := range c.DoMulti(ctx,
		c.B().Zadd().Key(index).ScoreMember().ScoreMember(float64(until), rec.Identity).Build(),
		c.B().Zremrangebyscore().Key(index).Min("-inf").Max(now).Build(),
		c.B().Pexpire().Key(index).Milliseconds(life).Nx().Build(),
		c.B().Pexpire().Key(index).Milliseconds(life).Gt().Build()) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("valkeystore: put override in its index: %w", err)
		}
	}
	return nil
}

// GetOverride implements driver.OverrideStore: the record under key, until
// Valkey drops it. A record the scripts would not read is an error.
func (s *Store) GetOverride(ctx context.Context, key string) (driver.OverrideRecord, bool, error) {
	c := s.e.client
	return readOverride(c.Do(ctx, c.B().Hmget().Key(key).Field("limit", "param", "until", "info", "id").Build()), key)
}

func readOverride(r valkey.ValkeyResult, key string) (driver.OverrideRecord, bool, error) {
	vals, err := r.ToArray()
	if err != nil {
		return driver.OverrideRecord{}, false, fmt.Errorf("valkeystore: get override %s: %w", key, err)
	}
	f, present := overrideFields(vals)
	if present == 0 {
		return driver.OverrideRecord{}, false, nil
	}
	limit, err1 := strconv.ParseInt(f[0], 10, 64)
	param, err2 := strconv.ParseInt(f[1], 10, 64)
	until, err3 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return driver.OverrideRecord{}, false, fmt.Errorf("valkeystore: malformed override %s: limit %q, param %q, until %q", key, f[0], f[1], f[2])
	}
	exp := time.UnixMicro(until)
	return driver.OverrideRecord{Identity: f[4], Limit: limit, Param: param, Expires: exp, Info: f[3]}, true, nil
}

// overrideFields are the strings of the HMGET reply vals (limit, param,
// until, info, id), and how many were present.
func overrideFields(vals []valkey.ValkeyMessage) (f [5]string, present int) {
	for i := range min(len(f), len(vals)) {
		if v, err := vals[i].ToString(); err == nil {
			f[i] = v
			present++
		}
	}
	return f, present
}

// DeleteOverride implements driver.OverrideStore.
func (s *Store) DeleteOverride(ctx context.Context, index, key, identity string) error {
	c := s.e.client
	for _, r := range c.DoMulti(ctx, c.B().Del().Key(key).Build(), c.B().Zrem().Key(index).Member(identity).Build()) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("valkeystore: delete override: %w", err)
		}
	}
	return nil
}

// ListOverrides implements driver.OverrideStore: the records listed in
// index whose hash Valkey still holds. A malformed record is left out and
// reported in the error, after the others are read.
func (s *Store) ListOverrides(ctx context.Context, index string, keyOf func(string) string) ([]driver.OverrideRecord, error) {
	c := s.e.client
	ids, err := c.Do(ctx, c.B().Zrange().Key(index).Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("valkeystore: list overrides: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	cmds := make(valkey.Commands, len(ids))
	for i, id := range ids {
		cmds[i] = c.B().Hmget().Key(keyOf(id)).Field("limit", "param", "until", "info", "id").Build()
	}
	var out []driver.OverrideRecord
	var bad error
	for i, r := range c.DoMulti(ctx, cmds...) {
		rec, ok, err := readOverride(r, keyOf(ids[i]))
		if err != nil {
			bad = err
			continue
		}
		if ok {
			out = append(out, rec)
		}
	}
	return out, bad
}
