// Command noopjson answers POST /json with a fixed RateLimitResponse in
// protobuf's JSON form, deciding nothing: the ceiling an HTTP rate-limit
// service can reach on a machine, measured beside the real ones in
// docs/envoy-bench.md.
//
//	noopjson -listen 127.0.0.1:18099
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
)

const answer = `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":1000000,"unit":"SECOND"},"limitRemaining":999999,"durationUntilReset":"1s"}]}`

func main() {
	listen := flag.String("listen", "127.0.0.1:18099", "HTTP `address`")
	flag.Parse()
	http.HandleFunc("POST /json", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answer)
	})
	log.Fatal(http.ListenAndServe(*listen, nil))
}
