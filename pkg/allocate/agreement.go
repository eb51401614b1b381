// Agreement rows: chains that share tasks (a prefix, or a join and what is below it) route the same traffic through
// each assignment of variants and batch sizes to the shared tasks.

package allocate

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/sleipnir-serving/sleipnir/pkg/milp"
)

// agreementRows make chains that share tasks route the same traffic through each assignment of variants and batch
// sizes to the tasks they share, as the first of them (ref) does: the tasks from the root to a task with several
// children (a shared prefix), or the root and a join with the tasks below it (addJoinAgreement). positions are the
// hops of those tasks, the same on every chain of the group; depth is one past the last of them.
// rows[key][k] is the row of chain others[k] for the assignment key.
type agreementRows struct {
	name      string
	positions []int
	// leafOpen says the last position is the chains' last hop, whose batch size the flow columns leave open (its
	// threshold): keyed on its variant alone.
	leafOpen bool
	depth    int
	ref      int
	others   []int
	rows     map[string][]int
}

// chainsThrough is the chains through task and the number of tasks from the root to it, inclusive.
func (m *model) chainsThrough(task string) (through []int, depth int) {
	for ci, chain := range m.chains {
		for i, name := range chain {
			if name == task {
				through = append(through, ci)
				depth = i + 1
			}
		}
	}
	return through, depth
}

// addAgreementRows adds the agreement rows (agreementRows), for every assignment of variants and batch sizes to the
// shared tasks that fits, with no flow columns yet: per task with several children its prefix, then per join.
func (m *model) addAgreementRows() {
	for _, t := range m.in.Spec.Tasks {
		if len(t.Children) < 2 {
			continue
		}
		through, depth := m.chainsThrough(t.Name)
		positions := make([]int, depth)
		for i := range positions {
			positions[i] = i
		}
		m.addAgreement("shared prefix ", through, positions, false)
	}
	for _, t := range m.in.Spec.Tasks {
		if t.Join != nil {
			m.addJoinAgreement(t.Name)
		}
	}
}

// addJoinAgreement makes the chains through join task j (one per parent: pipeline.Spec's validation admits a join of
// the root's children with no branching below it) agree on the root's variant and batch size and on the variants
// and batch sizes of j and the tasks below it, taken together: a request's item runs through one variant of each,
// whichever branch's chain counts it. Then a plan's flows glue into one assignment per request (the chains share
// nothing else), and the model stays exact. The last hop's batch size is left open (its threshold), as on any chain:
// the batch size it runs at must fit every branch's budget, which each chain's own capacity rows for it ensure
// (addJoinCapacity).
func (m *model) addJoinAgreement(j string) {
	through, depth := m.chainsThrough(j)
	positions := []int{0}
	for i := depth - 1; i < len(m.chains[through[0]]); i++ {
		positions = append(positions, i)
	}
	m.addAgreement("shared join ", through, positions, true)
}

// addJoinCapacity adds, for a variant of the last task of chains through a join, the capacity rows each such chain
// but the task's reference chain meets on its own: the same replicas and headroom as the variant's rows. Every
// chain through the join carries all of the task's items, so each must fit them, and a chain's flows at a threshold
// below the batch size the variant runs at find no capacity there: the batch size the items run at fits every
// branch's budget. Without them only the reference chain's thresholds would bound it.
func (m *model) addJoinCapacity(kv *keptVariant) {
	for ci, chain := range m.chains {
		if !m.viaJoin[ci] || chain[len(chain)-1] != kv.task || ci == m.refChain[kv.task] {
			continue
		}
		if kv.joinCapacity == nil {
			kv.joinCapacity = map[int]*capacityRows{}
		}
		jc := &capacityRows{}
		for bi := range kv.batches {
			jc.row = append(jc.row, m.prob.AddRow(fmt.Sprintf("capacity of %s/%s@%s (chain %d)", kv.task,
				kv.variant.Name, kv.label(bi), ci), math.Inf(-1), 0,
				milp.Term{Col: kv.replicasCol[bi], Coef: -kv.throughput[bi]},
				milp.Term{Col: kv.batchChoiceCol[bi], Coef: kv.headroom[bi]}))
		}
		kv.joinCapacity[ci] = jc
	}
}

// addAgreement adds the rows of one agreementRows group: chains through agree with through[0] at positions.
func (m *model) addAgreement(name string, through []int, positions []int, leafOpen bool) {
	pr := agreementRows{name: name, positions: positions, leafOpen: leafOpen, depth: positions[len(positions)-1] + 1,
		ref: through[0], others: through[1:], rows: map[string][]int{}}
	var keys []string
	names := map[string]string{} // row names, readable
	for _, pa := range m.paths {
		if !slices.Contains(through, pa.chain) {
			continue
		}
		// The batch combinations of the shared tasks that some combination of the whole path extends (one only
		// another chain can take still gets its rows: they keep that chain's flow through it at 0).
		m.eachFlowBatches(pa, func(batches []int) bool {
			key := pr.key(pa.hops, batches)
			if _, ok := pr.rows[key]; !ok {
				pr.rows[key] = nil
				keys = append(keys, key)
				names[key] = m.hopsNameAt(pa.hops, batches, positions)
				if leafOpen {
					names[key] = strings.TrimRightFunc(names[key], func(r rune) bool { return r != '@' }) + "*"
				}
			}
			return true
		})
	}
	sort.Strings(keys)
	for _, key := range keys {
		for range pr.others {
			pr.rows[key] = append(pr.rows[key], m.prob.AddRow(name+names[key], 0, 0))
		}
	}
	m.agreements = append(m.agreements, pr)
}

// key identifies the assignment of a path's hops at batch indexes to the shared tasks (the last one's variant alone
// when leafOpen): a map key, cheap to build (the pricer's search builds one per step).
func (pr *agreementRows) key(hops, batches []int) string {
	key := make([]byte, 0, 2*len(pr.positions))
	for n, i := range pr.positions {
		b := uint64(batches[i])
		if pr.leafOpen && n == len(pr.positions)-1 {
			b = 0
		}
		key = binary.AppendUvarint(binary.AppendUvarint(key, uint64(hops[i])), b)
	}
	return string(key)
}
