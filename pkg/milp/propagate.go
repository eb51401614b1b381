package milp

import "math"

// integerRows is the indexes of p's rows whose columns are all integer, the rows propagate works on.
func (p *Problem) integerRows() []int {
	var rows []int
	for i, r := range p.Rows {
		integer := true
		for _, t := range r.Terms {
			integer = integer && p.Integer[t.Col]
		}
		if integer {
			rows = append(rows, i)
		}
	}
	return rows
}

// propagate tightens a node's bounds lo, up by rows, rows of integer columns only, and says whether they can still
// be met: from each row's least and greatest activity under the bounds, how far one column can move before the
// others cannot make up for it (activity-based bound propagation). Rounds go on while some bound moves, at most
// propagationRounds.
func (p *Problem) propagate(rows []int, lo, up []float64) bool {
	for range propagationRounds {
		moved := false
		for _, i := range rows {
			r := &p.Rows[i]
			// The least and greatest activity over the terms with a finite bound on that side, and how many terms
			// have an infinite one (and which, when only one does).
			minAct, maxAct := 0.0, 0.0
			minInf, maxInf, minInfCol, maxInfCol := 0, 0, -1, -1
			for _, t := range r.Terms {
				l, u := lo[t.Col], up[t.Col]
				if t.Coef < 0 {
					l, u = u, l
				}
				if math.IsInf(l, 0) {
					minInf, minInfCol = minInf+1, t.Col
				} else {
					minAct += t.Coef * l
				}
				if math.IsInf(u, 0) {
					maxInf, maxInfCol = maxInf+1, t.Col
				} else {
					maxAct += t.Coef * u
				}
			}
			if minInf == 0 && minAct > r.Hi+intTol || maxInf == 0 && maxAct < r.Lo-intTol {
				return false
			}
			for _, t := range r.Terms {
				j, a := t.Col, t.Coef
				bl, bu := lo[j], up[j] // the bounds of j that minAct and maxAct count
				if a < 0 {
					bl, bu = bu, bl
				}
				// a*x[j] <= Hi - (the least of the others) and a*x[j] >= Lo - (the greatest of the others).
				newLo, newUp := math.Inf(-1), math.Inf(1)
				if rest, ok := others(minAct, minInf, minInfCol, j, a*bl); ok && !math.IsInf(r.Hi, 1) {
					if v := (r.Hi - rest) / a; a > 0 {
						newUp = v
					} else {
						newLo = v
					}
				}
				if rest, ok := others(maxAct, maxInf, maxInfCol, j, a*bu); ok && !math.IsInf(r.Lo, -1) {
					if v := (r.Lo - rest) / a; a > 0 {
						newLo = max(newLo, v)
					} else {
						newUp = min(newUp, v)
					}
				}
				if newLo = math.Ceil(newLo - intTol); newLo > lo[j] {
					lo[j], moved = newLo, true
				}
				if newUp = math.Floor(newUp + intTol); newUp < up[j] {
					up[j], moved = newUp, true
				}
				if lo[j] > up[j] {
					return false
				}
			}
		}
		if !moved {
			break
		}
	}
	return true
}

// others is the activity of a row's terms other than column j (whose own is own), given the total act over the
// terms with a finite bound and the number inf of those without (the last of them infCol): ok false when it is
// infinite.
func others(act float64, inf, infCol, j int, own float64) (float64, bool) {
	switch {
	case inf == 0:
		return act - own, true
	case inf == 1 && infCol == j:
		return act, true
	}
	return 0, false
}

// propagationRounds bounds the rounds of propagate: on the allocation models one round finds nearly all it will.
const propagationRounds = 5
