// Package alloctest measures what a piece of code allocates, for the tests that hold decoders of outside input to
// "no claimed size allocates before the bytes behind it are checked": what decoding n bytes allocates must be a
// multiple of n, never a size the input claims.
package alloctest

import "runtime"

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
