package main

import (
	"encoding/json"
	"io"
)

// writeJSON writes v to w as indented JSON, the form every --json output
// takes.
func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// writeOutput writes v to w as JSON with asJSON, else as text writes it
// (a method expression such as (*Report).WriteText).
func writeOutput[T any](w io.Writer, v T, asJSON bool, text func(T, io.Writer)) {
	if asJSON {
		writeJSON(w, v)
		return
	}
	text(v, w)
}
