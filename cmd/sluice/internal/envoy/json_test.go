package envoy

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// randomResponse is a response of the shapes ShouldRateLimit gives and of
// others (unknown enum values, names to escape, fractions of seconds,
// metadata, headers).
func randomResponse(r *rand.Rand) *rlsv3.RateLimitResponse {
	names := []string{"", "ab", "per-ip_limit.1", `q"uote`, `back\slash`, "tab\t", "é", "\u2028", "<&>"}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_Code(r.IntN(4))}
	for range r.IntN(5) {
		ds := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_Code(r.IntN(4)), LimitRemaining: uint32(r.IntN(3)) * uint32(r.Uint32()>>r.IntN(32))}
		if r.IntN(4) > 0 {
			ds.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
				Name: names[r.IntN(len(names))], RequestsPerUnit: uint32(r.IntN(2)) * r.Uint32(), Unit: rlsv3.RateLimitResponse_RateLimit_Unit(r.IntN(9)),
			}
			if r.IntN(3) == 0 {
				ds.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(uint32(r.IntN(3)) * r.Uint32())
			}
		}
		if r.IntN(4) > 0 {
			ds.DurationUntilReset = &durationpb.Duration{Seconds: r.Int64N(400 * 86400)}
			if r.IntN(8) == 0 {
				ds.DurationUntilReset.Nanos = r.Int32N(1e9)
			}
		}
		resp.Statuses = append(resp.Statuses, ds)
	}
	if r.IntN(8) == 0 {
		resp.DynamicMetadata, _ = structpb.NewStruct(map[string]any{"k": "v"})
	}
	if r.IntN(8) == 0 {
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: "x", Value: "y"}}
	}
	return resp
}

// TestResponseJSON: /json's answer is, byte for byte, protojson.Marshal's
// without its spaces, whenever appendResponse writes it, and protojson's
// otherwise; on random responses and on the answers of the Envoy tests.
func TestResponseJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	direct := 0
	for i := range 5000 {
		resp := randomResponse(r)
		want, err := protojson.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, want); err != nil {
			t.Fatal(err)
		}
		got, ok := appendResponse(nil, resp)
		if ok {
			direct++
			if !bytes.Equal(got, compact.Bytes()) {
				t.Fatalf("%d: %v\nwrote     %s\nprotojson %s", i, resp, got, compact.Bytes())
			}
		}
		out, err := marshalResponse(resp)
		if err != nil {
			t.Fatal(err)
		}
		back := &rlsv3.RateLimitResponse{}
		if err := protojson.Unmarshal(out, back); err != nil || !proto.Equal(back, resp) {
			t.Fatalf("%d: %s decodes to %v (%v), want %v", i, out, back, err, resp)
		}
	}
	if direct < 500 {
		t.Fatalf("only %d of 5000 written directly", direct)
	}
}

// TestResponseJSONFields: every field of the messages in an answer is
// written by appendResponse or makes it leave the answer to protojson
// (a field added by a new version of the Envoy API fails here).
func TestResponseJSONFields(t *testing.T) {
	known := map[protoreflect.FullName][]string{
		"envoy.service.ratelimit.v3.RateLimitResponse":                  {"overall_code", "statuses", "response_headers_to_add", "request_headers_to_add", "raw_body", "dynamic_metadata", "quota"},
		"envoy.service.ratelimit.v3.RateLimitResponse.DescriptorStatus": {"code", "current_limit", "limit_remaining", "duration_until_reset", "quota"},
		"envoy.service.ratelimit.v3.RateLimitResponse.RateLimit":        {"name", "requests_per_unit", "unit", "unit_multiplier"},
		"google.protobuf.Duration":                                      {"seconds", "nanos"},
		"google.protobuf.UInt32Value":                                   {"value"},
	}
	for _, m := range []proto.Message{&rlsv3.RateLimitResponse{}, &rlsv3.RateLimitResponse_DescriptorStatus{}, &rlsv3.RateLimitResponse_RateLimit{}, &durationpb.Duration{}, &wrapperspb.UInt32Value{}} {
		d := m.ProtoReflect().Descriptor()
		var got []string
		for i := range d.Fields().Len() {
			got = append(got, string(d.Fields().Get(i).Name()))
		}
		if !slices.Equal(got, known[d.FullName()]) {
			t.Errorf("%s has fields %v; appendResponse knows %v", d.FullName(), got, known[d.FullName()])
		}
	}
}
