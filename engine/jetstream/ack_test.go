package jetstream

import (
	"encoding/json"
	"testing"
)

// ackSeeds are acknowledgements as nats-server sends them, and inputs
// that must go to encoding/json.
var ackSeeds = []string{
	`{"stream":"INGEST","seq":42}`,
	`{"stream":"INGEST","seq":42,"duplicate":true}`,
	`{"stream":"INGEST","domain":"hub","seq":1}`,
	`{"stream":"INGEST","seq":7,"duplicate":false}`,
	` { "stream" : "S" , "seq" : 1e3 } `,
	`{"error":{"code":503,"err_code":10077,"description":"no leader"},"stream":"INGEST"}`,
	`{"error":{"code":400,"err_code":10070,"description":"wrong last msg ID: x"}}`,
	`{"stream":""}`,
	`{}`,
	`{"Stream":"S"}`,
	`{"stream":"S\u0041"}`,
	`{"stream":"S","duplicate":null}`,
	`{"stream":"S",}`,
	`{"stream":"S"} x`,
	`[]`,
	`{"stream":"S","seq":-0.5E+2}`,
	`{"stream":"S","seq":01}`,
	``,
}

// TestScanAck: an acknowledgement's usual shape is read without
// encoding/json, the rest is left to it.
func TestScanAck(t *testing.T) {
	for _, tc := range []struct {
		in                    string
		stream, duplicate, ok bool
	}{
		{`{"stream":"INGEST","seq":42}`, true, false, true},
		{`{"stream":"INGEST","seq":42,"duplicate":true}`, true, true, true},
		{`{"stream":"INGEST","domain":"hub","seq":1}`, true, false, true},
		{` { "stream" : "S" , "seq" : 1e3 } `, true, false, true},
		{`{"stream":""}`, false, false, true},
		{`{}`, false, false, true},
		{`{"error":{"code":503,"err_code":10077,"description":"no leader"},"stream":"INGEST"}`, false, false, false},
		{`{"Stream":"S"}`, false, false, false},
		{`{"stream":"S\u0041"}`, false, false, false},
		{`{"stream":"S",}`, false, false, false},
		{`{"stream":"S","seq":01}`, false, false, false},
		{``, false, false, false},
	} {
		stream, dup, ok := scanAck([]byte(tc.in))
		if stream != tc.stream || dup != tc.duplicate || ok != tc.ok {
			t.Errorf("scanAck(%s) = %v, %v, %v; want %v, %v, %v", tc.in, stream, dup, ok, tc.stream, tc.duplicate, tc.ok)
		}
	}
}

// FuzzScanAck: whatever scanAck reads itself, encoding/json reads the
// same way: valid, no error, the same stream and duplicate flag.
func FuzzScanAck(f *testing.F) {
	for _, s := range ackSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		stream, dup, ok := scanAck(b)
		if !ok {
			return
		}
		var ack pubAck
		if err := json.Unmarshal(b, &ack); err != nil {
			t.Fatalf("scanAck read %q, encoding/json refuses it: %v", b, err)
		}
		if ack.Error != nil || (ack.Stream != "") != stream || ack.Duplicate != dup {
			t.Fatalf("scanAck(%q) = stream %v, duplicate %v; encoding/json: %+v", b, stream, dup, ack)
		}
	})
}
