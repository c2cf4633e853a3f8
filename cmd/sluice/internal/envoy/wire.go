package envoy

import (
	"unicode/utf8"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ShouldRateLimit's messages in protobuf's binary form, as gRPC carries
// them. A request of the usual shape (a domain, descriptors of key/value
// entries, a hits_addend) is read here directly, and the answers
// ShouldRateLimit usually gives are written directly; anything else (a
// descriptor's limit override or hits_addend, an unknown field, a string
// that is not UTF-8, a wire type a field does not have; an answer with
// headers, metadata, a quota or unknown fields) is left to protobuf's own
// codec, which reads it or answers why not. The messages read and the bytes
// written are protobuf's: TestWireRequestDifferential, FuzzWireRequest and
// TestWireResponse hold the two equal.

// The fields read and written here, by number.
const (
	fRequestDomain, fRequestDescriptors, fRequestHits = 1, 2, 3
	fDescriptorEntries                                = 1
	fEntryKey, fEntryValue                            = 1, 2
	fResponseCode, fResponseStatuses                  = 1, 2
	fStatusCode, fStatusLimit                         = 1, 2
	fStatusRemaining, fStatusReset                    = 3, 4
	fLimitPerUnit, fLimitUnit, fLimitName             = 1, 2, 3
	fLimitMultiplier                                  = 4
	fWrapperValue                                     = 1
	fDurationSeconds, fDurationNanos                  = 1, 2
)

// readWireRequest decodes b into req, as proto.Unmarshal does, when it
// has the usual shape; false (req partly written) when it leaves b to
// protobuf. The strings of a message up to shareMax bytes are slices of
// one copy of it (b may be a buffer gRPC reuses). room, when not nil, is
// where the request's first descriptor and its list are written instead
// of allocating them.
func readWireRequest(b []byte, req *rlsv3.RateLimitRequest, room *wireRoom) bool {
	r := wireReader{b: b, end: len(b)}
	if len(b) <= shareMax {
		r.text = string(b)
	}
	for r.i < r.end {
		num, typ, ok := r.tag()
		switch {
		case !ok:
			return false
		case num == fRequestDomain && typ == protowire.BytesType:
			if req.Domain, ok = r.str(); !ok {
				return false
			}
		case num == fRequestDescriptors && typ == protowire.BytesType:
			var blk *descBlock
			if room != nil && req.Descriptors == nil {
				blk, req.Descriptors = &room.first, room.list[:0]
			}
			d, ok := r.descriptor(blk)
			if !ok {
				return false
			}
			req.Descriptors = append(req.Descriptors, d)
		case num == fRequestHits && typ == protowire.VarintType:
			v, ok := r.varint()
			if !ok {
				return false
			}
			req.HitsAddend = uint32(v)
		default:
			return false
		}
	}
	return true
}

// wireReader reads the fields of one message, b[i:end].
type wireReader struct {
	b      []byte
	i, end int
	// text is the whole message as a string, whose slices str returns; ""
	// when str copies.
	text string
}

// wireRoom is room for a request's usual descriptors: the list of one
// descriptor and the descriptor with its first entry, in the block of the
// call that reads it.
type wireRoom struct {
	list  [1]*commonrl.RateLimitDescriptor
	first descBlock
}

func (r *wireReader) tag() (protowire.Number, protowire.Type, bool) {
	num, typ, n := protowire.ConsumeTag(r.b[r.i:r.end])
	if n < 0 {
		return 0, 0, false
	}
	r.i += n
	return num, typ, true
}

func (r *wireReader) varint() (uint64, bool) {
	v, n := protowire.ConsumeVarint(r.b[r.i:r.end])
	if n < 0 {
		return 0, false
	}
	r.i += n
	return v, true
}

// span reads a length-delimited field's length and returns the offsets of
// its bytes.
func (r *wireReader) span() (start, end int, ok bool) {
	v, n := protowire.ConsumeVarint(r.b[r.i:r.end])
	if n < 0 || v > uint64(r.end-r.i-n) {
		return 0, 0, false
	}
	start = r.i + n
	end = start + int(v)
	r.i = end
	return start, end, true
}

// str reads a string field; false when it is not UTF-8 (protobuf refuses
// it).
func (r *wireReader) str() (string, bool) {
	start, end, ok := r.span()
	if !ok || !utf8.Valid(r.b[start:end]) {
		return "", false
	}
	if r.text != "" {
		return r.text[start:end], true
	}
	return string(r.b[start:end]), true
}

// inner reads a message field and returns a reader of its fields.
func (r *wireReader) inner() (wireReader, bool) {
	start, end, ok := r.span()
	if !ok {
		return wireReader{}, false
	}
	return wireReader{b: r.b, i: start, end: end, text: r.text}, true
}

// descriptor reads a descriptor of entries only, into blk (a new block
// when nil).
func (r *wireReader) descriptor(blk *descBlock) (*commonrl.RateLimitDescriptor, bool) {
	in, ok := r.inner()
	if !ok {
		return nil, false
	}
	if blk == nil {
		blk = new(descBlock)
	}
	d := &blk.d
	for in.i < in.end {
		num, typ, ok := in.tag()
		if !ok || num != fDescriptorEntries || typ != protowire.BytesType {
			return nil, false
		}
		e := &blk.first
		if d.Entries == nil {
			d.Entries = blk.entries[:0]
		} else {
			e = new(commonrl.RateLimitDescriptor_Entry)
		}
		if !in.entry(e) {
			return nil, false
		}
		d.Entries = append(d.Entries, e)
	}
	return d, true
}

// entry reads an entry, a key and a value, into e.
func (r *wireReader) entry(e *commonrl.RateLimitDescriptor_Entry) bool {
	in, ok := r.inner()
	if !ok {
		return false
	}
	for in.i < in.end {
		num, typ, ok := in.tag()
		switch {
		case !ok || typ != protowire.BytesType:
			return false
		case num == fEntryKey:
			e.Key, ok = in.str()
		case num == fEntryValue:
			e.Value, ok = in.str()
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	return true
}

// appendWireResponse appends resp, encoded as proto.Marshal does, to b;
// false when resp holds what it does not write, left to protobuf.
func appendWireResponse(b []byte, resp *rlsv3.RateLimitResponse) ([]byte, bool) {
	if len(resp.ResponseHeadersToAdd) > 0 || len(resp.RequestHeadersToAdd) > 0 || len(resp.RawBody) > 0 ||
		resp.DynamicMetadata != nil || resp.Quota != nil || len(resp.ProtoReflect().GetUnknown()) > 0 {
		return b, false
	}
	b = appendEnum(b, fResponseCode, int32(resp.OverallCode))
	for _, ds := range resp.Statuses {
		if ds == nil || ds.Quota != nil || len(ds.ProtoReflect().GetUnknown()) > 0 {
			return b, false
		}
		var ok bool
		if b, ok = appendMessage(b, fResponseStatuses, func(b []byte) ([]byte, bool) { return appendWireStatus(b, ds) }); !ok {
			return b, false
		}
	}
	return b, true
}

// appendWireStatus appends a descriptor status's fields.
func appendWireStatus(b []byte, ds *rlsv3.RateLimitResponse_DescriptorStatus) ([]byte, bool) {
	b = appendEnum(b, fStatusCode, int32(ds.Code))
	ok := true
	if l := ds.CurrentLimit; l != nil {
		if b, ok = appendMessage(b, fStatusLimit, func(b []byte) ([]byte, bool) { return appendWireLimit(b, l) }); !ok {
			return b, false
		}
	}
	if ds.LimitRemaining != 0 {
		b = protowire.AppendTag(b, fStatusRemaining, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(ds.LimitRemaining))
	}
	if d := ds.DurationUntilReset; d != nil {
		if b, ok = appendMessage(b, fStatusReset, func(b []byte) ([]byte, bool) { return appendWireDuration(b, d) }); !ok {
			return b, false
		}
	}
	return b, true
}

// appendWireLimit appends a current limit's fields.
func appendWireLimit(b []byte, l *rlsv3.RateLimitResponse_RateLimit) ([]byte, bool) {
	if len(l.ProtoReflect().GetUnknown()) > 0 {
		return b, false
	}
	if l.RequestsPerUnit != 0 {
		b = protowire.AppendTag(b, fLimitPerUnit, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(l.RequestsPerUnit))
	}
	b = appendEnum(b, fLimitUnit, int32(l.Unit))
	if l.Name != "" {
		b = protowire.AppendTag(b, fLimitName, protowire.BytesType)
		b = protowire.AppendString(b, l.Name)
	}
	if m := l.UnitMultiplier; m != nil {
		if len(m.ProtoReflect().GetUnknown()) > 0 {
			return b, false
		}
		b = protowire.AppendTag(b, fLimitMultiplier, protowire.BytesType)
		if m.Value == 0 {
			return append(b, 0), true
		}
		b = protowire.AppendVarint(b, uint64(1+protowire.SizeVarint(uint64(m.Value))))
		b = protowire.AppendTag(b, fWrapperValue, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(m.Value))
	}
	return b, true
}

// appendWireDuration appends a duration's fields.
func appendWireDuration(b []byte, d *durationpb.Duration) ([]byte, bool) {
	if len(d.ProtoReflect().GetUnknown()) > 0 {
		return b, false
	}
	if d.Seconds != 0 {
		b = protowire.AppendTag(b, fDurationSeconds, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(d.Seconds))
	}
	if d.Nanos != 0 {
		b = protowire.AppendTag(b, fDurationNanos, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(d.Nanos)))
	}
	return b, true
}

// appendEnum appends an enum field, nothing for its zero value.
func appendEnum(b []byte, num protowire.Number, v int32) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(int64(v)))
}

// appendMessage appends a message field whose fields body appends, its
// length before them. The messages written here are short: a length
// below 128 takes one byte, reserved before body runs; a longer one is
// moved along by the bytes its length takes.
func appendMessage(b []byte, num protowire.Number, body func([]byte) ([]byte, bool)) ([]byte, bool) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	at := len(b)
	b, ok := body(append(b, 0))
	if !ok {
		return b, false
	}
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b, true
	}
	size := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, size-1)...)
	copy(b[at+size:], b[at+1:at+1+n])
	protowire.AppendVarint(b[at:at], uint64(n))
	return b, true
}
