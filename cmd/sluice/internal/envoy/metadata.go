package envoy

import (
	"fmt"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// dynamicMetadata is the answer's dynamic metadata under
// RESPONSE_DYNAMIC_METADATA, as envoyproxy/ratelimit writes it: the domain,
// the descriptors (entries as "key=value", override, hits_addend), the
// request's hits_addend, and the metadata of the descriptors that passed,
// merged (the first value of a key wins; mappings merge).
func dynamicMetadata(req *rlsv3.RateLimitRequest, rs []resolved, statuses []*rlsv3.RateLimitResponse_DescriptorStatus) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		descs = append(descs, structpb.NewStructValue(descriptorStruct(d)))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i, ds := range statuses {
		if ds.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT || i >= len(rs) || rs[i].node == nil || rs[i].node.Metadata == nil {
			continue
		}
		if rs[i].kind == kindUnlimited || rs[i].kind == kindNone {
			continue
		}
		m, err := structpb.NewStruct(rs[i].node.Metadata)
		if err != nil {
			continue // checked at load: every configured metadata converts
		}
		mergeStruct(passed, m)
	}
	if len(passed.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: fields}
}

func descriptorStruct(d *commonrl.RateLimitDescriptor) *structpb.Struct {
	entries := make([]*structpb.Value, 0, len(d.GetEntries()))
	for _, e := range d.GetEntries() {
		entries = append(entries, structpb.NewStringValue(fmt.Sprintf("%s=%s", e.GetKey(), e.GetValue())))
	}
	f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
	if l := d.GetLimit(); l != nil {
		f["limit"] = structpb.NewStringValue(l.String())
	}
	if h := d.GetHitsAddend(); h != nil {
		f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
	}
	return &structpb.Struct{Fields: f}
}

// mergeStruct adds src's fields to dst: a key dst lacks is added, two
// mappings under one key merge, any other existing value stays.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		cur, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = v
			continue
		}
		if a, b := cur.GetStructValue(), v.GetStructValue(); a != nil && b != nil {
			mergeStruct(a, b)
		}
	}
}
