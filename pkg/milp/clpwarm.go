package milp

// #cgo pkg-config: clp
// void sleipnir_clp_set_col_bounds(void *model, const double *lo, const double *up, int n);
// void sleipnir_clp_quiet(void *model);
// void sleipnir_clp_load(void *model, int ncols, int nrows, const int *start, const int *index, const double *value,
//                        const double *collb, const double *colub, const double *obj, const double *rowlb,
//                        const double *rowub);
// void sleipnir_clp_primal(void *model, double *out, int n);
// void sleipnir_clp_duals(void *model, double *out, int n);
// void sleipnir_clp_reduced_costs(void *model, double *out, int n);
// void sleipnir_clp_add_columns(void *model, int n, const double *lo, const double *up, const double *obj,
//                               const int *start, const int *index, const double *value);
// int sleipnir_clp_basis_len(void *model);
// int sleipnir_clp_get_basis(void *model, unsigned char *out);
// void sleipnir_clp_set_basis(void *model, const unsigned char *in);
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

// dbl is v as a C array (Go memory, which C may read during the call: it holds no Go pointers); nil when empty.
func dbl(v []float64) *C.double {
	if len(v) == 0 {
		return nil
	}
	return (*C.double)(unsafe.Pointer(&v[0]))
}

// setColumnBounds replaces every column bound of the loaded problem, keeping the basis of the last solve.
func setColumnBounds(s *clp.Simplex, lo, up []float64) {
	C.sleipnir_clp_set_col_bounds(clpModel(s), dbl(lo), dbl(up), C.int(len(lo)))
}

func quiet(s *clp.Simplex) { C.sleipnir_clp_quiet(clpModel(s)) }

// columnMatrix is a constraint matrix in compressed sparse column form, as Clp loads it.
type columnMatrix struct {
	start, index []C.int
	value        []float64
}

// indexes is the row indexes as a C array, nil when empty.
func (a *columnMatrix) indexes() *C.int {
	if len(a.index) == 0 {
		return nil
	}
	return &a.index[0]
}

// load loads the problem into s: the matrix with its column bounds lo, up, objective obj and row bounds.
func load(s *clp.Simplex, a *columnMatrix, lo, up, obj, rowLo, rowHi []float64) {
	C.sleipnir_clp_load(clpModel(s), C.int(len(a.start)-1), C.int(len(rowLo)), &a.start[0], a.indexes(), dbl(a.value),
		dbl(lo), dbl(up), dbl(obj), dbl(rowLo), dbl(rowHi))
}

// atLowerBound is Clp's status of a non-basic column at its lower bound.
const atLowerBound = 3

// addColumns appends the columns of a (rows indexed as in the loaded problem) with their bounds and
// minimisation-form objective.
func addColumns(s *clp.Simplex, a *columnMatrix, lo, up, obj []float64) {
	C.sleipnir_clp_add_columns(clpModel(s), C.int(len(a.start)-1), dbl(lo), dbl(up), dbl(obj), &a.start[0], a.indexes(),
		dbl(a.value))
}

// rowDuals is the row duals of the last solve.
func rowDuals(s *clp.Simplex, n int) []float64 {
	y := make([]float64, n)
	C.sleipnir_clp_duals(clpModel(s), dbl(y), C.int(n))
	return y
}

// reducedCosts is the column reduced costs (minimisation form) of the last solve.
func reducedCosts(s *clp.Simplex, n int) []float64 {
	d := make([]float64, n)
	C.sleipnir_clp_reduced_costs(clpModel(s), dbl(d), C.int(n))
	return d
}

// primal is the primal column solution of the last solve.
func primal(s *clp.Simplex, n int) []float64 {
	x := make([]float64, n)
	C.sleipnir_clp_primal(clpModel(s), dbl(x), C.int(n))
	return x
}

// basis is the basis of the last solve (nil if there is none).
func basis(s *clp.Simplex) []byte {
	out := make([]byte, int(C.sleipnir_clp_basis_len(clpModel(s))))
	if len(out) == 0 || C.sleipnir_clp_get_basis(clpModel(s), (*C.uchar)(&out[0])) == 0 {
		return nil
	}
	return out
}

// setBasis makes b the starting basis of the next solve.
func setBasis(s *clp.Simplex, b []byte) {
	if len(b) > 0 {
		C.sleipnir_clp_set_basis(clpModel(s), (*C.uchar)(&b[0]))
	}
}
