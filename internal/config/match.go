package config

import (
	"strings"
)

// Matching a request's descriptor entries against a domain's tree.

// Match finds the descriptor that applies to a request's entries, as
// envoyproxy/ratelimit does: at each level the exact key_value first, then a
// wildcard value by prefix, then the key alone; the node of the last entry
// applies, and a request deeper than the tree matches nothing. matched holds
// the values to count under, level by level (the wildcard pattern itself
// where share_threshold is set).
func (d *Domain) Match(entries []Entry) (node *Descriptor, matched []Entry) {
	level := d.Descriptors
	for i, e := range entries {
		next := find(level, e)
		if next == nil {
			return nil, nil
		}
		v := e.Value
		if next.ShareThreshold && strings.HasSuffix(next.Value, "*") {
			v = next.Value
		}
		matched = append(matched, Entry{Key: e.Key, Value: v})
		if i == len(entries)-1 {
			return next, matched
		}
		if len(next.Children) == 0 {
			return nil, nil
		}
		level = next.Children
	}
	return nil, nil
}

func find(level []*Descriptor, e Entry) *Descriptor {
	for _, c := range level {
		if c.Key == e.Key && c.Value == e.Value && c.Value != "" {
			return c
		}
	}
	for _, c := range level {
		if c.Key == e.Key && strings.HasSuffix(c.Value, "*") && strings.HasPrefix(e.Value, strings.TrimSuffix(c.Value, "*")) {
			return c
		}
	}
	for _, c := range level {
		if c.Key == e.Key && c.Value == "" {
			return c
		}
	}
	return nil
}
