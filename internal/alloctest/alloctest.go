// Package alloctest measures what a piece of code allocates, for the tests that hold decoders of outside input to
// "no claimed size allocates before the bytes behind it are checked": what decoding n bytes allocates must be a
// multiple of n, never a size the input claims.
package alloctest

import (
	"bytes"
	"encoding/json"
	"runtime"
	"testing"
)

// Bytes is how many bytes f allocated: the whole process's, so other goroutines' small allocations count too (the
// bounds tests use are megabytes above what any input of theirs may cost).
func Bytes(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// JSONBound is what encoding/json may allocate decoding n bytes (into `any` it costs about 1 KB per input byte).
func JSONBound(n int) uint64 { return 1024*uint64(n) + 1<<20 }

// DecodeJSON is what the fuzz targets of JSON read from outside check: decoding data into a T allocates within
// JSONBound, and, when data is valid, what it decoded encodes and decodes again to the same encoding. ok is false
// for data that is not a T.
func DecodeJSON[T any](t testing.TB, data []byte) (v T, ok bool) {
	t.Helper()
	var err error
	if n := Bytes(func() { err = json.Unmarshal(data, &v) }); n > JSONBound(len(data)) {
		t.Fatalf("decoding %d bytes allocated %d", len(data), n)
	}
	if err != nil {
		return v, false
	}
	out, err := json.Marshal(&v)
	if err != nil {
		t.Fatalf("what decoded does not encode: %v", err)
	}
	var again T
	if err := json.Unmarshal(out, &again); err != nil {
		t.Fatalf("%s does not decode: %v", out, err)
	}
	if out2, _ := json.Marshal(&again); !bytes.Equal(out, out2) {
		t.Fatalf("a round trip changed the value:\n%s\n%s", out, out2)
	}
	return v, true
}
