package envoy

import (
	"math"
	"unsafe"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluicehq/sluice/cmd/sluice/internal/jsonscan"
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

// decodeRequest decodes body as protojson.Unmarshal does, into a new
// request. Its strings may share body's bytes, which must not change
// afterwards (see shareMax).
func decodeRequest(body []byte) (*rlsv3.RateLimitRequest, error) {
	blk := new(requestBlock)
	if readRequest(body, blk) {
		return &blk.req, nil
	}
	blk.req.Reset()
	return &blk.req, protojson.Unmarshal(body, &blk.req)
}

// requestBlock is a request with room for its first descriptor, and that
// descriptor's for its first entry: the usual request, of one descriptor
// of one entry, is one allocation.
type requestBlock struct {
	req   rlsv3.RateLimitRequest
	descs [1]*commonrl.RateLimitDescriptor
	first descBlock
}

// shareMax is the largest body whose strings (the domain, the entries'
// keys and values) are all slices of one copy of it, one allocation for
// them all (none when the body's own array is no larger: its strings are
// slices of the body itself); a larger one's are copied each, so that a
// string kept after the call (a metric's label, a cache's key) never holds
// on to more than this many bytes of a body.
const shareMax = 1024

// readRequest decodes body into blk's request when it has the usual shape;
// false (the request partly written) when it leaves body to protojson.
func readRequest(body []byte, blk *requestBlock) bool {
	req := &blk.req
	p := jsonReader{jsonscan.Reader{B: body}}
	switch {
	case len(body) > 0 && cap(body) <= shareMax:
		p.Text = unsafe.String(unsafe.SliceData(body), len(body))
	case len(body) <= shareMax:
		p.Text = string(body)
	}
	var seenDomain, seenDescriptors, seenHits bool
	ok := p.object(func(name []byte) bool {
		switch string(name) {
		case "domain":
			if seenDomain {
				return false
			}
			seenDomain = true
			s, ok := p.Str()
			req.Domain = s
			return ok
		case "descriptors":
			if seenDescriptors {
				return false
			}
			seenDescriptors = true
			return p.array(func() bool {
				room := &blk.first
				if req.Descriptors == nil {
					req.Descriptors = blk.descs[:0]
				} else {
					room = new(descBlock)
				}
				d, ok := p.descriptor(room)
				req.Descriptors = append(req.Descriptors, d)
				return ok
			})
		case "hitsAddend", "hits_addend":
			if seenHits {
				return false
			}
			seenHits = true
			n, ok := p.Digits(math.MaxUint32)
			req.HitsAddend = uint32(n)
			return ok
		}
		return false
	})
	p.Space()
	return ok && p.I == len(p.B)
}

// jsonReader reads the JSON of the usual shape; every method returns false
// on anything else, leaving it to protojson.
type jsonReader struct{ jsonscan.Reader }

// object reads an object, calling field for each member's name with the
// reader at its value.
func (p *jsonReader) object(field func(name []byte) bool) bool {
	if !p.Next('{') {
		return false
	}
	if p.Next('}') {
		return true
	}
	for {
		name, ok := p.raw()
		if !ok || !p.Next(':') || !field(name) {
			return false
		}
		if p.Next('}') {
			return true
		}
		if !p.Next(',') {
			return false
		}
	}
}

// array reads an array, calling elem with the reader at each element.
func (p *jsonReader) array(elem func() bool) bool {
	if !p.Next('[') {
		return false
	}
	if p.Next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if p.Next(']') {
			return true
		}
		if !p.Next(',') {
			return false
		}
	}
}

// raw reads a string without escapes or control characters, valid UTF-8,
// and returns its bytes.
func (p *jsonReader) raw() ([]byte, bool) {
	start, end, ok := p.Span()
	if !ok {
		return nil, false
	}
	return p.B[start:end], true
}

// descBlock is a descriptor with room for its first entry: the usual
// descriptor, of one entry, is one allocation instead of three.
type descBlock struct {
	d       commonrl.RateLimitDescriptor
	entries [1]*commonrl.RateLimitDescriptor_Entry
	first   commonrl.RateLimitDescriptor_Entry
}

// descriptor reads a descriptor of entries only, into blk.
func (p *jsonReader) descriptor(blk *descBlock) (*commonrl.RateLimitDescriptor, bool) {
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
			e.Key, ok = p.Str()
		case "value":
			if seenValue {
				return false
			}
			seenValue = true
			e.Value, ok = p.Str()
		}
		return ok
	})
}
