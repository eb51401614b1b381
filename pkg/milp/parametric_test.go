package milp

import (
	"math"
	"slices"
	"testing"
)

// TestRootBasis: a search whose root starts from a ParametricLP's basis (Options.RootBasis), at the root's own
// bounds or at another point's, or from a basis of the wrong size (ignored), proves the optimum brute force finds:
// the basis only changes where the root's dual simplex starts, never the bound.
func TestRootBasis(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		p := knapsack(seed, 6)
		lp, err := NewParametricLP(p, 0)
		if err != nil {
			t.Fatal(err)
		}
		var other []byte // the basis at the last value of column 0
		for v := p.Lower[0]; v <= p.Upper[0]; v++ {
			q := *p
			q.Lower, q.Upper = slices.Clone(p.Lower), slices.Clone(p.Upper)
			q.Lower[0], q.Upper[0] = v, v
			want, ok := bruteForce(&q)
			if ok2, feasible, _, _ := lp.At(v); !ok2 || feasible != ok {
				t.Fatalf("seed %d, column 0 at %v: the relaxation says solved %v, feasible %v; brute force %v", seed,
					v, ok2, feasible, ok)
			}
			own := lp.Basis()
			if len(own) != q.NumCols()+len(q.Rows) {
				t.Fatalf("seed %d: a basis of %d statuses for %d columns and %d rows", seed, len(own), q.NumCols(),
					len(q.Rows))
			}
			for name, basis := range map[string][]byte{"its own": own, "another point's": other,
				"of the wrong size": own[1:]} {
				res, err := Solve(&q, Options{RootBasis: basis})
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					if res.Status != Infeasible {
						t.Fatalf("seed %d, at %v, %s basis: %s where brute force finds no point", seed, v, name,
							res.Status)
					}
					continue
				}
				if res.Status != Optimal || math.Abs(res.Objective-want) > 1e-6 || q.Violation(res.X) > 1e-6 {
					t.Fatalf("seed %d, at %v, %s basis: %s %v, brute force %v", seed, v, name, res.Status,
						res.Objective, want)
				}
			}
			other = own
		}
	}
}
