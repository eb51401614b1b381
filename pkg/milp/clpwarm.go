package milp

// #cgo pkg-config: clp
// #include <stdlib.h>
// void sleipnir_clp_set_col_bounds(void *model, const double *lo, const double *up, int n);
// void sleipnir_clp_quiet(void *model);
import "C"

import (
	"unsafe"

	"github.com/lanl/clp"
)

// clpModel is the ClpSimplex behind a clp.Simplex. lanl/clp v1.2.0 (pinned in go.mod) keeps it in the struct's
// first field; the brute-force and CBC cross-checks (every node after the root goes through it) check that it works.
func clpModel(s *clp.Simplex) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(s))
}

// setColumnBounds replaces every column bound of the loaded problem, keeping the basis of the last solve.
func setColumnBounds(s *clp.Simplex, lo, up []float64) {
	n := len(lo)
	buf := (*[1 << 28]C.double)(C.malloc(C.size_t(2*n) * C.size_t(unsafe.Sizeof(C.double(0)))))[: 2*n : 2*n]
	defer C.free(unsafe.Pointer(&buf[0]))
	for j := 0; j < n; j++ {
		buf[j], buf[n+j] = C.double(lo[j]), C.double(up[j])
	}
	C.sleipnir_clp_set_col_bounds(clpModel(s), &buf[0], &buf[n], C.int(n))
}

func quiet(s *clp.Simplex) { C.sleipnir_clp_quiet(clpModel(s)) }
