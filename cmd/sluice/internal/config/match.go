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
	path := pathBuffer(buf, len(entries))
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

// pathBuffer is buf emptied, or a new buffer when buf holds fewer than n.
func pathBuffer(buf []*Descriptor, n int) []*Descriptor {
	if cap(buf) < n {
		return make([]*Descriptor, 0, n)
	}
	return buf[:0]
}

// CountedAs returns the entries a request is counted under once Walk
// matched path: its own values, or the wildcard pattern where
// share_threshold is set.
func CountedAs(path []*Descriptor, entries []Entry) []Entry {
	if !anyShared(path[:len(entries)]) {
		return entries // counted as sent: no copy
	}
	out := make([]Entry, len(entries))
	for i, e := range entries {
		out[i] = e
		if n := path[i]; n.shared() {
			out[i].Value = n.Value
		}
	}
	return out
}

// anyShared reports whether a descriptor of path shares one counter
// among the values it matches.
func anyShared(path []*Descriptor) bool {
	for _, n := range path {
		if n.shared() {
			return true
		}
	}
	return false
}

// shared reports whether every value n's wildcard matches shares one
// counter (share_threshold).
func (n *Descriptor) shared() bool {
	return n.ShareThreshold && n.wildcard != nil
}

// find returns the descriptor of level that e matches, the most specific
// way first (matchKinds), or nil.
func find(level []*Descriptor, e Entry) *Descriptor {
	for _, matches := range matchKinds {
		if c := firstMatch(level, e, matches); c != nil {
			return c
		}
	}
	return nil
}

// matchKinds are the ways a descriptor matches an entry, the most
// specific first: an exact key and value, a wildcard value, the key alone.
var matchKinds = [...]func(*Descriptor, Entry) bool{(*Descriptor).exactFor, (*Descriptor).wildcardFor, (*Descriptor).keyOnlyFor}

// firstMatch returns the first descriptor of level that matches e by
// matches, or nil.
func firstMatch(level []*Descriptor, e Entry, matches func(*Descriptor, Entry) bool) *Descriptor {
	for _, c := range level {
		if matches(c, e) {
			return c
		}
	}
	return nil
}

// exactFor reports whether c names e's key and, exactly, its value.
func (c *Descriptor) exactFor(e Entry) bool {
	return c.Key == e.Key && c.Value == e.Value && c.Value != ""
}

// wildcardFor reports whether c names e's key with a wildcard value that
// e's value matches.
func (c *Descriptor) wildcardFor(e Entry) bool {
	return c.Key == e.Key && c.wildcard != nil && wildcardMatch(c.wildcard, e.Value)
}

// keyOnlyFor reports whether c names e's key and no value (any value).
func (c *Descriptor) keyOnlyFor(e Entry) bool {
	return c.Key == e.Key && c.Value == ""
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
	return holdsInOrder(value[len(first):len(value)-len(last)], parts[1:len(parts)-1])
}

// holdsInOrder reports whether s holds each of parts, in order and
// without overlap.
func holdsInOrder(s string, parts []string) bool {
	for _, p := range parts {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}
