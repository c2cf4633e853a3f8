package envoy

import (
	"bytes"
	"math/rand/v2"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// sameAsProto checks the codec's decoding of b against proto.Unmarshal:
// both accept it and decode the same message, or both refuse it with the
// same reason. It reports whether the direct reader decoded b.
func sameAsProto(t *testing.T, b []byte) bool {
	t.Helper()
	var want rlsv3.RateLimitRequest
	werr := proto.Unmarshal(b, &want)
	var direct rlsv3.RateLimitRequest
	read := readWireRequest(b, &direct, nil)
	if read && werr != nil {
		t.Fatalf("%x: read directly, but protobuf refuses it: %v", b, werr)
	}
	if read && !proto.Equal(&direct, &want) {
		t.Fatalf("%x: read directly as %v, protobuf reads %v", b, &direct, &want)
	}
	var got undecoded
	codec := lenientCodec{encoding.GetCodecV2(protoenc.Name)}
	if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(bytes.Clone(b))}, &got); err != nil {
		t.Fatalf("%x: the codec failed: %v", b, err)
	}
	switch {
	case (got.err == nil) != (werr == nil):
		t.Fatalf("%x: codec error %v, protobuf error %v", b, got.err, werr)
	case got.err != nil && got.err.Error() != werr.Error():
		t.Fatalf("%x: codec refuses with %q, protobuf with %q", b, got.err, werr)
	case got.err == nil && !proto.Equal(&got.req, &want):
		t.Fatalf("%x: codec reads %v, protobuf reads %v", b, &got.req, &want)
	}
	return read
}

// wireRequest is a request in protobuf's binary form, of the usual shape
// or not: a request of the JSON generator encoded, then sometimes with an
// override or a descriptor's hits_addend, an unknown field, a field
// repeated, a string that is not UTF-8, a byte changed, or cut short.
func wireRequest(r *rand.Rand, g *jsonGen) []byte {
	var req rlsv3.RateLimitRequest
	for protojson.Unmarshal(g.request(), &req) != nil {
	}
	if r.IntN(8) == 0 && len(req.Descriptors) > 0 {
		d := req.Descriptors[r.IntN(len(req.Descriptors))]
		if r.IntN(2) == 0 {
			d.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5}
		} else {
			d.HitsAddend = wrapperspb.UInt64(2)
		}
	}
	b, err := proto.Marshal(&req)
	if err != nil {
		panic(err)
	}
	switch r.IntN(12) {
	case 0: // an unknown field
		b = protowire.AppendVarint(protowire.AppendTag(b, protowire.Number(4+r.IntN(20)), protowire.VarintType), 7)
	case 1: // the domain again, or a string that is not UTF-8
		b = protowire.AppendString(protowire.AppendTag(b, fRequestDomain, protowire.BytesType), []string{"again", "\xff", "\xed\xa0\x80"}[r.IntN(3)])
	case 2: // hits_addend again, as a varint too large for uint32
		b = protowire.AppendVarint(protowire.AppendTag(b, fRequestHits, protowire.VarintType), 1<<33+5)
	case 3: // a field of the wrong wire type
		b = protowire.AppendFixed32(protowire.AppendTag(b, protowire.Number(1+r.IntN(3)), protowire.Fixed32Type), 1)
	case 4:
		if len(b) > 0 {
			b[r.IntN(len(b))] ^= byte(1 + r.IntN(255))
		}
	case 5:
		if len(b) > 0 {
			b = b[:r.IntN(len(b))]
		}
	case 6: // an entry with an unknown field, a descriptor of an empty entry
		entry := protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 1)
		if r.IntN(2) == 0 {
			entry = nil
		}
		desc := protowire.AppendBytes(protowire.AppendTag(nil, fDescriptorEntries, protowire.BytesType), entry)
		b = protowire.AppendBytes(protowire.AppendTag(b, fRequestDescriptors, protowire.BytesType), desc)
	}
	return b
}

// TestWireRequestDifferential: on requests of every shape, the codec
// accepts exactly what protobuf accepts, decodes it to the same message,
// and refuses the rest with protobuf's reason; the direct reader takes
// most of them.
func TestWireRequestDifferential(t *testing.T) {
	t.Parallel()
	usual, _ := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonrl.RateLimitDescriptor{{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}, HitsAddend: 2})
	for _, b := range [][]byte{usual, nil, {0}, {0x0a}, {0x0a, 0x05, 'a'}, {0x12, 0x00}, {0x18, 0x80}} {
		sameAsProto(t, b)
	}
	if !sameAsProto(t, usual) {
		t.Fatal("the usual request is not read directly")
	}
	r := rand.New(rand.NewPCG(5, 6))
	g := &jsonGen{r: r}
	const n = 20000
	read, accepted := 0, 0
	for range n {
		b := wireRequest(r, g)
		if sameAsProto(t, b) {
			read++
		}
		if proto.Unmarshal(b, &rlsv3.RateLimitRequest{}) == nil {
			accepted++
		}
	}
	t.Logf("%d requests: %d read directly, %d accepted by protobuf", n, read, accepted)
	if read < n/3 || accepted-read < n/20 || n-accepted < n/50 {
		t.Errorf("the generator's mix is off: %d read directly, %d accepted only through protobuf, %d refused (of %d)",
			read, accepted-read, n-accepted, n)
	}
}

// FuzzWireRequest: whatever the bytes, the codec and protobuf agree (see
// sameAsProto).
func FuzzWireRequest(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 8))
	g := &jsonGen{r: r}
	for range 50 {
		f.Add(wireRequest(r, g))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sameAsProto(t, b)
	})
}

// TestWireResponse: the codec writes an answer, byte for byte, as
// protobuf's codec does, whether appendWireResponse writes it or leaves
// it to protobuf; on random responses, most written directly.
func TestWireResponse(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	codec := lenientCodec{encoding.GetCodecV2(protoenc.Name)}
	direct := 0
	for i := range 5000 {
		resp := randomResponse(r)
		if r.IntN(10) == 0 && len(resp.Statuses) > 0 && resp.Statuses[0] != nil && resp.Statuses[0].CurrentLimit != nil {
			resp.Statuses[0].CurrentLimit.Name = string(bytes.Repeat([]byte("n"), 100+r.IntN(300))) // a status longer than 127 bytes
		}
		want, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := appendWireResponse(nil, resp); ok {
			direct++
		}
		got, err := codec.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Materialize(), want) {
			t.Fatalf("%d: %v\nwrote    %x\nprotobuf %x", i, resp, got.Materialize(), want)
		}
	}
	if direct < 2500 {
		t.Fatalf("only %d of 5000 written directly", direct)
	}
}

// TestWireAllocations: the codec reads the usual request (a domain, one
// descriptor of one entry) in one allocation, the copy of the message its
// strings are slices of (the descriptor, its entry and their list are
// written in the room of the undecoded request), and writes the usual
// answer in one (its bytes, the buffer gRPC takes them in and the list of
// it, together).
func TestWireAllocations(t *testing.T) {
	codec := lenientCodec{encoding.GetCodecV2(protoenc.Name)}
	in, _ := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonrl.RateLimitDescriptor{{
		Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}})
	data := mem.BufferSlice{mem.SliceBuffer(in)}
	var u undecoded
	read := testing.AllocsPerRun(100, func() {
		u = undecoded{}
		if codec.Unmarshal(data, &u) != nil || u.err != nil {
			t.Fatal(u.err)
		}
	})
	resp, blocks := newAnswer(1)
	resp.Statuses[0] = &blocks[0].status
	blocks[0].status.Code = rlsv3.RateLimitResponse_OK
	blocks[0].status.LimitRemaining = 999
	blocks[0].limit.RequestsPerUnit, blocks[0].limit.Unit = 1000, rlsv3.RateLimitResponse_RateLimit_SECOND
	blocks[0].status.CurrentLimit = &blocks[0].limit
	blocks[0].status.DurationUntilReset = setDuration(&blocks[0].reset, 1e9)
	write := testing.AllocsPerRun(100, func() {
		if _, err := codec.Marshal(resp); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("read %.0f, write %.0f allocations", read, write)
	if read > 1 || write > 1 {
		t.Errorf("the usual request read in %.0f allocations (want at most 1), its answer written in %.0f (want at most 1)", read, write)
	}
}
