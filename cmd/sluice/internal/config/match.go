package config

import "strings"

// Matching a request's descriptor entries against a domain's tree.

// Entry is one key/value pair of a request's descriptor.
type Entry struct{ Key, Value string }

// Match finds the descriptor that applies to a request's entries, as
// envoyproxy/ratelimit does: at each level the exact key and value first,
// then the wildcard values in file order (each '*' matches any run of
// characters, none included), then the key alone; the node of the last
// entry applies, and a request deeper than the tree matches nothing.
// matched holds the values to count under, level by level: the request's,
// or the wildcard pattern itself where share_threshold is set.
func (d *Domain) Match(entries []Entry) (node *Descriptor, matched []Entry) {
	path := d.Walk(entries)
	if path == nil {
		return nil, nil
	}
	return path[len(path)-1], CountedAs(path, entries)
}

// Walk returns the node matched at each level by Match's rules, one per
// entry, or nil when the entries match no node of the tree.
func (d *Domain) Walk(entries []Entry) []*Descriptor {
	return d.WalkInto(nil, entries)
}

// WalkInto is Walk writing the path in buf's storage when it is large
// enough (buf's length is ignored), so that a caller can reuse one buffer.
func (d *Domain) WalkInto(buf []*Descriptor, entries []Entry) []*Descriptor {
	if len(entries) == 0 {
		return nil
	}
	path := buf[:0]
	if cap(path) < len(entries) {
		path = make([]*Descriptor, 0, len(entries))
	}
	level := d.Descriptors
	for i, e := range entries {
		next := find(level, e)
		if next == nil {
			return nil
		}
		path = append(path, next)
		if i == len(entries)-1 {
			return path
		}
		if len(next.Children) == 0 {
			return nil
		}
		level = next.Children
	}
	return nil
}

// CountedAs returns the entries a request is counted under once Walk
// matched path: its own values, or the wildcard pattern where
// share_threshold is set.
func CountedAs(path []*Descriptor, entries []Entry) []Entry {
	shared := false
	for i := range entries {
		if n := path[i]; n.ShareThreshold && n.wildcard != nil {
			shared = true
		}
	}
	if !shared {
		return entries // counted as sent: no copy
	}
	out := make([]Entry, len(entries))
	for i, e := range entries {
		out[i] = e
		if n := path[i]; n.ShareThreshold && n.wildcard != nil {
			out[i].Value = n.Value
		}
	}
	return out
}

func find(level []*Descriptor, e Entry) *Descriptor {
	for _, c := range level {
		if c.Key == e.Key && c.Value == e.Value && c.Value != "" {
			return c
		}
	}
	for _, c := range level {
		if c.Key == e.Key && c.wildcard != nil && wildcardMatch(c.wildcard, e.Value) {
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

// wildcardMatch reports whether value matches the pattern whose literal
// parts, split at each '*', are parts: value starts with the first part,
// ends with the last, and holds the middle ones in order between them,
// without overlap.
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}
