// Bound updates on a live ClpSimplex, so that each branch-and-bound node re-solves from the previous node's basis
// instead of reloading the problem (github.com/lanl/clp v1.2.0 exposes no bound setters).
#include "ClpSimplex.hpp"

extern "C" void sleipnir_clp_set_col_bounds(void *model, const double *lo, const double *up, int n) {
  ClpSimplex *m = static_cast<ClpSimplex *>(model);
  double *l = m->columnLower();
  double *u = m->columnUpper();
  for (int j = 0; j < n; j++) {
    l[j] = lo[j];
    u[j] = up[j];
  }
}

extern "C" void sleipnir_clp_quiet(void *model) { static_cast<ClpSimplex *>(model)->setLogLevel(0); }
