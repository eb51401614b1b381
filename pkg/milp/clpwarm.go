package milp

// #cgo pkg-config: clp
// #include <stdlib.h>
// void sleipnir_clp_set_col_bounds(void *model, const double *lo, const double *up, int n);
// void sleipnir_clp_quiet(void *model);
// void sleipnir_clp_load(void *model, int ncols, int nrows, const int *start, const int *index, const double *value,
//                        const double *collb, const double *colub, const double *obj, const double *rowlb,
//                        const double *rowub);
// void sleipnir_clp_primal(void *model, double *out, int n);
// void sleipnir_clp_duals(void *model, double *out, int n);
// void sleipnir_clp_add_columns(void *model, int n, const double *lo, const double *up, const double *obj,
//                               const int *start, const int *index, const double *value);
// int sleipnir_clp_basis_len(void *model);
// int sleipnir_clp_get_basis(void *model, unsigned char *out);
// void sleipnir_clp_set_basis(void *model, const unsigned char *in);
// int sleipnir_clp_iterations(void *model);
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

// columnMatrix is a constraint matrix in compressed sparse column form, as Clp loads it.
type columnMatrix struct {
	start, index []C.int
	value        []float64
}

// load loads the problem into s: the matrix with its column bounds lo, up, objective obj and row bounds.
func load(s *clp.Simplex, a *columnMatrix, lo, up, obj, rowLo, rowHi []float64) {
	ncols, nrows := len(a.start)-1, len(rowLo)
	var index *C.int
	var value *C.double
	if len(a.index) > 0 {
		index, value = &a.index[0], (*C.double)(unsafe.Pointer(&a.value[0]))
	}
	dbl := func(v []float64) *C.double {
		if len(v) == 0 {
			return nil
		}
		return (*C.double)(unsafe.Pointer(&v[0]))
	}
	C.sleipnir_clp_load(clpModel(s), C.int(ncols), C.int(nrows), &a.start[0], index, value, dbl(lo), dbl(up), dbl(obj),
		dbl(rowLo), dbl(rowHi))
}

// atLowerBound is Clp's status of a non-basic column at its lower bound.
const atLowerBound = 3

// addColumns appends the columns of a (rows indexed as in the loaded problem) with their bounds and
// minimisation-form objective.
func addColumns(s *clp.Simplex, a *columnMatrix, lo, up, obj []float64) {
	n := len(a.start) - 1
	var index *C.int
	var value *C.double
	if len(a.index) > 0 {
		index, value = &a.index[0], (*C.double)(unsafe.Pointer(&a.value[0]))
	}
	C.sleipnir_clp_add_columns(clpModel(s), C.int(n), (*C.double)(unsafe.Pointer(&lo[0])),
		(*C.double)(unsafe.Pointer(&up[0])), (*C.double)(unsafe.Pointer(&obj[0])), &a.start[0], index, value)
}

// rowDuals is the row duals of the last solve.
func rowDuals(s *clp.Simplex, n int) []float64 {
	y := make([]float64, n)
	if n > 0 {
		C.sleipnir_clp_duals(clpModel(s), (*C.double)(unsafe.Pointer(&y[0])), C.int(n))
	}
	return y
}

// primal is the primal column solution of the last solve.
func primal(s *clp.Simplex, n int) []float64 {
	x := make([]float64, n)
	if n > 0 {
		C.sleipnir_clp_primal(clpModel(s), (*C.double)(unsafe.Pointer(&x[0])), C.int(n))
	}
	return x
}

// basis is the basis of the last solve (nil if there is none).
func basis(s *clp.Simplex) []byte {
	n := int(C.sleipnir_clp_basis_len(clpModel(s)))
	buf := (*[1 << 28]C.uchar)(C.malloc(C.size_t(n)))[:n:n]
	defer C.free(unsafe.Pointer(&buf[0]))
	if C.sleipnir_clp_get_basis(clpModel(s), &buf[0]) == 0 {
		return nil
	}
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(buf[i])
	}
	return out
}

// setBasis makes b the starting basis of the next solve.
func setBasis(s *clp.Simplex, b []byte) {
	n := len(b)
	buf := (*[1 << 28]C.uchar)(C.malloc(C.size_t(n)))[:n:n]
	defer C.free(unsafe.Pointer(&buf[0]))
	for i := range b {
		buf[i] = C.uchar(b[i])
	}
	C.sleipnir_clp_set_basis(clpModel(s), &buf[0])
}

// iterations is the number of simplex iterations of the last solve.
func iterations(s *clp.Simplex) int { return int(C.sleipnir_clp_iterations(clpModel(s))) }
