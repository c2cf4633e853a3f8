package simulate

import (
	"bufio"
	"io"
	"strconv"
	"time"
)

// CSVHeader is the first line of WriteCSV's output.
const CSVHeader = "policy,algorithm,bucket_start_s,requests,allowed,refused,allowed_units,remaining,admitted_per_s,nominal_per_s,keys_in_window"

// CSVLeaseColumns follow CSVHeader in a run with an in_flight policy.
const CSVLeaseColumns = ",held,crashed,peak"

// WriteCSV writes the result's numbers, one line per policy and bucket:
// bucket_start_s is seconds from the start; remaining is the watched key's
// at the end of the bucket; admitted_per_s the units allowed per second,
// to all keys together, over the policy's rate window ending with the
// bucket (the units in the window divided by the whole window); nominal_per_s
// the policy's rate for one key; keys_in_window the distinct keys that sent
// requests in that window (together they may be admitted about
// nominal_per_s × keys_in_window).
//
// A run with an in_flight policy has three more columns, empty for rate
// policies: held, the leases held at the end of the bucket, all keys
// together; crashed, those of them held by crashed holders; peak, the most
// leases one key held at once in the bucket. For an in_flight policy,
// remaining is the watched key's free slots and nominal_per_s is 0.
func WriteCSV(w io.Writer, r *Result) error {
	bw := bufio.NewWriter(w)
	leases := false
	for _, p := range r.Policies {
		leases = leases || p.InFlight()
	}
	bw.WriteString(CSVHeader)
	if leases {
		bw.WriteString(CSVLeaseColumns)
	}
	bw.WriteString("\n")
	var b []byte
	for _, p := range r.Policies {
		for i, bk := range p.Buckets {
			b = b[:0]
			b = append(b, p.Name...)
			b = append(b, ',')
			b = append(b, p.Rule.Algorithm.String()...)
			b = append(b, ',')
			b = strconv.AppendFloat(b, (r.Bucket * time.Duration(i)).Seconds(), 'f', -1, 64)
			for _, n := range []int64{bk.Requests, bk.Allowed, bk.Refused, bk.AllowedUnits, bk.Remaining} {
				b = append(b, ',')
				b = strconv.AppendInt(b, n, 10)
			}
			b = append(b, ',')
			b = strconv.AppendFloat(b, bk.Admitted, 'f', 3, 64)
			b = append(b, ',')
			b = strconv.AppendFloat(b, p.Nominal, 'f', 3, 64)
			b = append(b, ',')
			b = strconv.AppendInt(b, bk.Keys, 10)
			b = appendLeaseColumns(b, leases, p.InFlight(), bk)
			b = append(b, '\n')
			bw.Write(b)
		}
	}
	return bw.Flush()
}

// appendLeaseColumns appends bk's lease columns to b when the run has
// them (leases): its figures for an in_flight policy, empty ones for a
// rate policy.
func appendLeaseColumns(b []byte, leases, inFlight bool, bk Bucket) []byte {
	if !leases {
		return b
	}
	if !inFlight {
		return append(b, ",,,"...)
	}
	for _, n := range []int64{bk.Held, bk.Crashed, bk.Peak} {
		b = append(b, ',')
		b = strconv.AppendInt(b, n, 10)
	}
	return b
}
