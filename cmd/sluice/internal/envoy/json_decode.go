package envoy

import (
	"unicode/utf8"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// POST /json's request: a RateLimitRequest in protobuf's JSON form.
// Requests of the usual shape (a domain, descriptors of plain key/value
// entries, a hits_addend in digits; any JSON whitespace) are read here
// directly; anything else (an override, a descriptor's hits_addend, an
// escape in a string, null, a number written otherwise, a field given
// twice, an unknown field, bytes that are not UTF-8, anything after the
// object) is left to protojson, which reads it or answers why not. So the
// requests accepted, their meaning and the reasons of refusals are
// protojson's: TestDecodeRequestDifferential and FuzzDecodeRequest hold
// the two equal.

// decodeRequest decodes body into req as protojson.Unmarshal does.
func decodeRequest(body []byte, req *rlsv3.RateLimitRequest) error {
	if readRequest(body, req) {
		return nil
	}
	req.Reset()
	return protojson.Unmarshal(body, req)
}

// shareMax is the largest body whose strings (the domain, the entries'
// keys and values) are all slices of one copy of it, one allocation for
// them all; a larger one's are copied each, so that a string kept after
// the call (a metric's label, a cache's key) never holds on to more than
// this many bytes of a body.
const shareMax = 1024

// readRequest decodes body into req when it has the usual shape; false
// (req partly written) when it leaves body to protojson.
func readRequest(body []byte, req *rlsv3.RateLimitRequest) bool {
	p := jsonReader{b: body}
	if len(body) <= shareMax {
		p.text = string(body)
	}
	var seenDomain, seenDescriptors, seenHits bool
	ok := p.object(func(name []byte) bool {
		switch string(name) {
		case "domain":
			if seenDomain {
				return false
			}
			seenDomain = true
			s, ok := p.str()
			req.Domain = s
			return ok
		case "descriptors":
			if seenDescriptors {
				return false
			}
			seenDescriptors = true
			return p.array(func() bool {
				d, ok := p.descriptor()
				req.Descriptors = append(req.Descriptors, d)
				return ok
			})
		case "hitsAddend", "hits_addend":
			if seenHits {
				return false
			}
			seenHits = true
			n, ok := p.uint32()
			req.HitsAddend = n
			return ok
		}
		return false
	})
	p.space()
	return ok && p.i == len(p.b)
}

// jsonReader reads the JSON of the usual shape; every method returns false
// on anything else, leaving it to protojson.
type jsonReader struct {
	b []byte
	i int
	// text is b as a string, whose slices str returns; "" when str copies.
	text string
}

func (p *jsonReader) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// next skips whitespace and consumes c if it comes next.
func (p *jsonReader) next(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// object reads an object, calling field for each member's name with the
// reader at its value.
func (p *jsonReader) object(field func(name []byte) bool) bool {
	if !p.next('{') {
		return false
	}
	if p.next('}') {
		return true
	}
	for {
		name, ok := p.raw()
		if !ok || !p.next(':') || !field(name) {
			return false
		}
		if p.next('}') {
			return true
		}
		if !p.next(',') {
			return false
		}
	}
}

// array reads an array, calling elem with the reader at each element.
func (p *jsonReader) array(elem func() bool) bool {
	if !p.next('[') {
		return false
	}
	if p.next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if p.next(']') {
			return true
		}
		if !p.next(',') {
			return false
		}
	}
}

// raw reads a string without escapes or control characters, valid UTF-8,
// and returns its bytes.
func (p *jsonReader) raw() ([]byte, bool) {
	start, end, ok := p.span()
	if !ok {
		return nil, false
	}
	return p.b[start:end], true
}

// span reads a string as raw does and returns the offsets of its bytes.
func (p *jsonReader) span() (start, end int, ok bool) {
	if !p.next('"') {
		return 0, 0, false
	}
	start = p.i
	ascii := true
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			end = p.i
			p.i++
			return start, end, ascii || utf8.Valid(p.b[start:end])
		case c == '\\' || c < 0x20:
			return 0, 0, false
		case c >= 0x80:
			ascii = false
		}
	}
	return 0, 0, false
}

// str reads a string as raw does: a slice of text, or a copy.
func (p *jsonReader) str() (string, bool) {
	start, end, ok := p.span()
	if !ok {
		return "", false
	}
	if p.text != "" {
		return p.text[start:end], true
	}
	return string(p.b[start:end]), true
}

// uint32 reads a number in digits, without a leading zero (but 0 itself),
// sign, fraction or exponent, within uint32's range.
func (p *jsonReader) uint32() (uint32, bool) {
	p.space()
	start := p.i
	var n uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		n = n*10 + uint64(p.b[p.i]-'0')
		if n > 1<<32-1 {
			return 0, false
		}
		p.i++
	}
	digits := p.i - start
	if digits == 0 || digits > 1 && p.b[start] == '0' {
		return 0, false
	}
	// What follows must end the number: not a fraction or an exponent.
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	return uint32(n), true
}

// descBlock is a descriptor with room for its first entry: the usual
// descriptor, of one entry, is one allocation instead of three.
type descBlock struct {
	d       commonrl.RateLimitDescriptor
	entries [1]*commonrl.RateLimitDescriptor_Entry
	first   commonrl.RateLimitDescriptor_Entry
}

// descriptor reads a descriptor of entries only.
func (p *jsonReader) descriptor() (*commonrl.RateLimitDescriptor, bool) {
	blk := new(descBlock)
	d := &blk.d
	seenEntries := false
	ok := p.object(func(name []byte) bool {
		if string(name) != "entries" || seenEntries {
			return false
		}
		seenEntries = true
		return p.array(func() bool {
			e := &blk.first
			if d.Entries == nil {
				d.Entries = blk.entries[:0]
			} else {
				e = new(commonrl.RateLimitDescriptor_Entry)
			}
			d.Entries = append(d.Entries, e)
			return p.entry(e)
		})
	})
	return d, ok
}

// entry reads an entry, a key and a value, into e.
func (p *jsonReader) entry(e *commonrl.RateLimitDescriptor_Entry) bool {
	var seenKey, seenValue bool
	return p.object(func(name []byte) bool {
		var ok bool
		switch string(name) {
		case "key":
			if seenKey {
				return false
			}
			seenKey = true
			e.Key, ok = p.str()
		case "value":
			if seenValue {
				return false
			}
			seenValue = true
			e.Value, ok = p.str()
		}
		return ok
	})
}
