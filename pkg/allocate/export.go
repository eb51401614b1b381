package allocate

import (
	"math"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
)

// Complete is the model with constraint 7 of the paper written out, for solvers without Sleipnir's latency
// propagation (CBC, in the cross-check): a binary I(p) per path says it carries traffic, and then its latency at the
// chosen batch sizes must fit its budget (a big-M row), and every variant on it must be hosted.
func (m *model) complete() *milp.Problem {
	src := m.prob
	p := &milp.Problem{Sense: src.Sense,
		Obj: append([]float64(nil), src.Obj...), Lower: append([]float64(nil), src.Lower...),
		Upper: append([]float64(nil), src.Upper...), Integer: append([]bool(nil), src.Integer...),
		Names: append([]string(nil), src.Names...), Priority: append([]int(nil), src.Priority...),
		Rows: append([]milp.Row(nil), src.Rows...)}
	flowUB := p.Upper[m.demand]
	for _, pa := range m.paths {
		used := p.AddCol("carries "+m.pathName(pa), 0, 0, 1, true, 0)
		p.AddRow("I(p) of "+m.pathName(pa), math.Inf(-1), 0, milp.Term{Col: pa.col, Coef: 1},
			milp.Term{Col: used, Coef: -flowUB})
		worst := 0.0
		var lat []milp.Term
		for _, h := range pa.hops {
			kv := m.variants[h]
			hosted := []milp.Term{{Col: used, Coef: 1}}
			for bi, z := range kv.z {
				lat = append(lat, milp.Term{Col: z, Coef: kv.lat[bi]})
				hosted = append(hosted, milp.Term{Col: z, Coef: -1})
			}
			worst += slicesMax(kv.lat)
			p.AddRow("hosted on "+m.pathName(pa), math.Inf(-1), 0, hosted...)
		}
		if bigM := worst - pa.maxLat; bigM > 0 {
			lat = append(lat, milp.Term{Col: used, Coef: bigM})
			p.AddRow("latency of "+m.pathName(pa), math.Inf(-1), pa.maxLat+bigM, lat...)
		}
	}
	return p
}
