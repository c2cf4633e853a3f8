package envoy

import (
	"strconv"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
)

// POST /json's answer: a RateLimitResponse in protobuf's JSON form, the
// bytes protojson.Marshal writes (without its deliberately varying
// spaces) for the answers ShouldRateLimit usually gives, written directly;
// protojson itself writes any other (dynamic metadata, headers, a quota,
// a name that needs escaping). TestResponseJSON holds the two equal.

// marshalResponse encodes resp as protojson.Marshal does.
func marshalResponse(resp *rlsv3.RateLimitResponse) ([]byte, error) {
	return appendMarshal(make([]byte, 0, 64+160*len(resp.Statuses)), resp)
}

// appendMarshal appends resp, encoded as protojson.Marshal does, to b.
func appendMarshal(b []byte, resp *rlsv3.RateLimitResponse) ([]byte, error) {
	if out, ok := appendResponse(b, resp); ok {
		return out, nil
	}
	return protojson.MarshalOptions{}.MarshalAppend(b[:0:0], resp)
}

// appendResponse appends resp's JSON to b; false when resp holds what it
// does not write, left to protojson.
func appendResponse(b []byte, resp *rlsv3.RateLimitResponse) ([]byte, bool) {
	if len(resp.ResponseHeadersToAdd) > 0 || len(resp.RequestHeadersToAdd) > 0 || len(resp.RawBody) > 0 ||
		resp.DynamicMetadata != nil || resp.Quota != nil || len(resp.ProtoReflect().GetUnknown()) > 0 {
		return b, false
	}
	b = append(b, '{')
	sep := false
	if resp.OverallCode != 0 {
		var ok bool
		if b, ok = appendEnumField(b, &sep, "overallCode", rlsv3.RateLimitResponse_Code_name, int32(resp.OverallCode)); !ok {
			return b, false
		}
	}
	if len(resp.Statuses) > 0 {
		var ok bool
		if b, ok = appendStatuses(appendKey(b, &sep, "statuses"), resp.Statuses); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// appendStatuses appends the list of descriptor statuses to b; false when
// one holds what appendStatus does not write.
func appendStatuses(b []byte, statuses []*rlsv3.RateLimitResponse_DescriptorStatus) ([]byte, bool) {
	b = append(b, '[')
	for i, ds := range statuses {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendStatus(b, ds); !ok {
			return b, false
		}
	}
	return append(b, ']'), true
}

// appendStatus appends a descriptor status's JSON to b; false when it holds
// what it does not write.
func appendStatus(b []byte, ds *rlsv3.RateLimitResponse_DescriptorStatus) ([]byte, bool) {
	if ds == nil || ds.Quota != nil || len(ds.ProtoReflect().GetUnknown()) > 0 {
		return b, false
	}
	b = append(b, '{')
	sep := false
	ok := true
	if ds.Code != 0 {
		if b, ok = appendEnumField(b, &sep, "code", rlsv3.RateLimitResponse_Code_name, int32(ds.Code)); !ok {
			return b, false
		}
	}
	if l := ds.CurrentLimit; l != nil {
		if b, ok = appendCurrentLimit(appendKey(b, &sep, "currentLimit"), l); !ok {
			return b, false
		}
	}
	if ds.LimitRemaining != 0 {
		b = appendKey(b, &sep, "limitRemaining")
		b = strconv.AppendUint(b, uint64(ds.LimitRemaining), 10)
	}
	if d := ds.DurationUntilReset; d != nil {
		if b, ok = appendDuration(appendKey(b, &sep, "durationUntilReset"), d); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// appendCurrentLimit appends a status's current limit to b; false when it
// holds what it does not write (a name that is not a plain string, an
// unknown unit, unknown fields).
func appendCurrentLimit(b []byte, l *rlsv3.RateLimitResponse_RateLimit) ([]byte, bool) {
	if !plainString(l.Name) || len(l.ProtoReflect().GetUnknown()) > 0 {
		return b, false
	}
	b = append(b, '{')
	sep := false
	if l.Name != "" {
		b = appendStringField(b, &sep, "name", l.Name)
	}
	if l.RequestsPerUnit != 0 {
		b = appendKey(b, &sep, "requestsPerUnit")
		b = strconv.AppendUint(b, uint64(l.RequestsPerUnit), 10)
	}
	if l.Unit != 0 {
		var ok bool
		if b, ok = appendEnumField(b, &sep, "unit", rlsv3.RateLimitResponse_RateLimit_Unit_name, int32(l.Unit)); !ok {
			return b, false
		}
	}
	if m := l.UnitMultiplier; m != nil {
		if len(m.ProtoReflect().GetUnknown()) > 0 {
			return b, false
		}
		b = appendKey(b, &sep, "unitMultiplier")
		b = strconv.AppendUint(b, uint64(m.Value), 10)
	}
	return append(b, '}'), true
}

// appendEnumField writes key and the name of enum value v, as protojson
// does; false when names has none for v.
func appendEnumField(b []byte, sep *bool, key string, names map[int32]string, v int32) ([]byte, bool) {
	name, ok := names[v]
	if !ok {
		return b, false
	}
	return appendStringField(b, sep, key, name), true
}

// appendDuration writes whole seconds ("5s"); false for what it leaves to
// protojson (fractions, values out of range, unknown fields).
func appendDuration(b []byte, d *durationpb.Duration) ([]byte, bool) {
	const maxSeconds = 315576000000 // protojson's range: ±10,000 years
	if d.Nanos != 0 || d.Seconds < -maxSeconds || d.Seconds > maxSeconds || len(d.ProtoReflect().GetUnknown()) > 0 {
		return b, false
	}
	b = append(b, '"')
	b = strconv.AppendInt(b, d.Seconds, 10)
	return append(b, 's', '"'), true
}

// appendKey writes a field's name, after a comma unless it is the first.
func appendKey(b []byte, sep *bool, key string) []byte {
	if *sep {
		b = append(b, ',')
	}
	*sep = true
	b = append(b, '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

// appendStringField writes key and a plain string (see plainString).
func appendStringField(b []byte, sep *bool, key, v string) []byte {
	b = appendKey(b, sep, key)
	b = append(b, '"')
	b = append(b, v...)
	return append(b, '"')
}

// plainString reports whether s is written as it is between quotes:
// printable ASCII without '"' or '\'.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
