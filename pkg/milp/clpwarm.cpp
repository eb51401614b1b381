// Bound updates on a live ClpSimplex, so that each branch-and-bound node re-solves from the previous node's basis
// instead of reloading the problem (github.com/lanl/clp v1.2.0 exposes no bound setters).
#include <vector>

#include "ClpSimplex.hpp"

extern "C" void sleipnir_clp_set_col_bounds(void *model, const double *lo, const double *up, int n) {
  ClpSimplex *m = static_cast<ClpSimplex *>(model);
  double *l = m->columnLower();
  double *u = m->columnUpper();
  for (int j = 0; j < n; j++) {
    l[j] = lo[j];
    u[j] = up[j];
  }
  // Tell a solve that keeps its work areas (startFinishOptions) to reload the column bounds.
  m->setWhatsChanged(m->whatsChanged() & ~(COLUMN_LOWER_SAME | COLUMN_UPPER_SAME));
}

// Loading the whole matrix in one call: lanl/clp builds it a column at a time, and CoinPackedMatrix copies the
// matrix on every appended column, which made loading a 2000-column model take 30 ms, ten times its root LP.
extern "C" void sleipnir_clp_load(void *model, int ncols, int nrows, const int *start, const int *index,
                                  const double *value, const double *collb, const double *colub, const double *obj,
                                  const double *rowlb, const double *rowub) {
  std::vector<CoinBigIndex> starts(start, start + ncols + 1);
  static_cast<ClpSimplex *>(model)->loadProblem(ncols, nrows, starts.data(), index, value, collb, colub, obj, rowlb,
                                                rowub);
}

// The primal column solution in one copy (lanl/clp reads it with one cgo call per column).
extern "C" void sleipnir_clp_primal(void *model, double *out, int n) {
  const double *x = static_cast<ClpSimplex *>(model)->primalColumnSolution();
  for (int j = 0; j < n; j++) out[j] = x[j];
}

extern "C" void sleipnir_clp_quiet(void *model) { static_cast<ClpSimplex *>(model)->setLogLevel(0); }

// The basis (one status byte per column, then per row) of the last solve, and setting it as the start of the next:
// each branch-and-bound node starts from its parent's optimal basis, a few dual pivots away from its own.
extern "C" int sleipnir_clp_basis_len(void *model) {
  ClpSimplex *m = static_cast<ClpSimplex *>(model);
  return m->numberColumns() + m->numberRows();
}

extern "C" int sleipnir_clp_get_basis(void *model, unsigned char *out) {
  ClpSimplex *m = static_cast<ClpSimplex *>(model);
  const unsigned char *st = m->statusArray();
  if (!st) return 0;
  int n = m->numberColumns() + m->numberRows();
  for (int i = 0; i < n; i++) out[i] = st[i];
  return 1;
}

extern "C" void sleipnir_clp_set_basis(void *model, const unsigned char *in) {
  ClpSimplex *m = static_cast<ClpSimplex *>(model);
  unsigned char *st = m->statusArray();
  if (!st) return;
  int n = m->numberColumns() + m->numberRows();
  for (int i = 0; i < n; i++) st[i] = in[i];
  m->setWhatsChanged(m->whatsChanged() & ~BASIS_SAME);
}

extern "C" int sleipnir_clp_iterations(void *model) { return static_cast<ClpSimplex *>(model)->numberIterations(); }
