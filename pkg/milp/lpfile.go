package milp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// WriteLP writes p in the CPLEX LP format that CBC, Clp and most solvers read. Columns are named c<j> and rows
// r<i> (the problem's own names may hold characters the format forbids); a comment line maps them back.
func WriteLP(w io.Writer, p *Problem) error {
	bw := bufio.NewWriter(w)
	for j, name := range p.Names {
		fmt.Fprintf(bw, "\\ c%d = %s\n", j, name)
	}
	if p.Sense == Maximize {
		bw.WriteString("Maximize\n")
	} else {
		bw.WriteString("Minimize\n")
	}
	var obj []Term
	for j, c := range p.Obj {
		if c != 0 {
			obj = append(obj, Term{Col: j, Coef: c})
		}
	}
	fmt.Fprintf(bw, " obj:%s\nSubject To\n", lpTerms(obj))
	for i, r := range p.Rows {
		lhs := lpTerms(r.Terms)
		switch {
		case r.Lo == r.Hi:
			fmt.Fprintf(bw, " r%d:%s = %s\n", i, lhs, lpNumber(r.Lo))
		default:
			if !math.IsInf(r.Lo, -1) {
				fmt.Fprintf(bw, " r%d_lo:%s >= %s\n", i, lhs, lpNumber(r.Lo))
			}
			if !math.IsInf(r.Hi, 1) {
				fmt.Fprintf(bw, " r%d_hi:%s <= %s\n", i, lhs, lpNumber(r.Hi))
			}
		}
	}
	writeLPBounds(bw, p)
	var ints []string
	for j, integer := range p.Integer {
		if integer {
			ints = append(ints, "c"+strconv.Itoa(j))
		}
	}
	if len(ints) > 0 {
		bw.WriteString("General\n")
		for i := 0; i < len(ints); i += 16 {
			fmt.Fprintf(bw, " %s\n", strings.Join(ints[i:min(i+16, len(ints))], " "))
		}
	}
	bw.WriteString("End\n")
	return bw.Flush()
}

// lpNumber writes v exactly (17 significant digits), so that CBC reads back the very problem.
func lpNumber(v float64) string { return strconv.FormatFloat(v, 'g', 17, 64) }

// lpTerms writes a linear expression; an empty one as 0 c0, since the format has no empty expression.
func lpTerms(ts []Term) string {
	var b strings.Builder
	for i, t := range ts {
		c := t.Coef
		switch {
		case c < 0:
			b.WriteString(" - ")
			c = -c
		case i > 0:
			b.WriteString(" + ")
		default:
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s c%d", lpNumber(c), t.Col)
	}
	if len(ts) == 0 {
		b.WriteString(" 0 c0")
	}
	return b.String()
}

// writeLPBounds writes the Bounds section: every column's bounds, infinite ones as the format spells them.
func writeLPBounds(bw *bufio.Writer, p *Problem) {
	bw.WriteString("Bounds\n")
	for j := range p.Obj {
		lo, up := p.Lower[j], p.Upper[j]
		switch {
		case math.IsInf(lo, -1) && math.IsInf(up, 1):
			fmt.Fprintf(bw, " c%d free\n", j)
		case math.IsInf(up, 1):
			fmt.Fprintf(bw, " c%d >= %s\n", j, lpNumber(lo))
		case math.IsInf(lo, -1):
			fmt.Fprintf(bw, " -inf <= c%d <= %s\n", j, lpNumber(up))
		default:
			fmt.Fprintf(bw, " %s <= c%d <= %s\n", lpNumber(lo), j, lpNumber(up))
		}
	}
}

// ErrNoCBC says the CBC command-line solver is not installed.
var ErrNoCBC = errors.New("the cbc command is not installed (Debian: apt-get install coinor-cbc)")

// SolveCBC solves p with the CBC command-line solver, an independent check on Solve. It returns Optimal or
// Infeasible with the objective value, or an error when CBC is missing or says something else. CBC runs without
// preprocessing (CBC 2.10 has been seen to call feasible allocation models infeasible with it), without cut
// generation (with it, CBC 2.10.8 returned as "optimal" an allocation 1% worse than a point that satisfies every row:
// random instance 108 of the cross-check) and with zero gap tolerances.
func SolveCBC(ctx context.Context, p *Problem) (Status, float64, error) {
	f, err := os.CreateTemp("", "sleipnir-cbc-*.lp")
	if err != nil {
		return "", 0, err
	}
	defer os.Remove(f.Name())
	if err := WriteLP(f, p); err != nil {
		f.Close()
		return "", 0, err
	}
	if err := f.Close(); err != nil {
		return "", 0, err
	}
	return SolveCBCFile(ctx, f.Name())
}

// SolveCBCFile is SolveCBC on a problem already written in LP format (WriteLP) in the file model.
func SolveCBCFile(ctx context.Context, model string) (Status, float64, error) {
	bin, err := exec.LookPath("cbc")
	if err != nil {
		return "", 0, ErrNoCBC
	}
	dir, err := os.MkdirTemp("", "sleipnir-cbc-")
	if err != nil {
		return "", 0, err
	}
	defer os.RemoveAll(dir)
	sol := filepath.Join(dir, "model.sol")
	// primalT 1e-9: at CBC's default primal tolerance it declared 36.03 optimal on a max-demand model where 36.72
	// is feasible (a big-M latency row and a capacity row with a queueing headroom, pkg/allocate's cross-check).
	out, err := exec.CommandContext(ctx, bin, model, "preprocess", "off", "cuts", "off", "increment", "1e-9", "ratioGap", "0",
		"allowableGap", "1e-10", "primalT", "1e-9", "solve", "solution", sol).CombinedOutput()
	if err != nil {
		// CBC 2.10.8 crashes writing the solution file of a problem its presolve finds infeasible (its output, which
		// said so, is lost with it): ask again without a solution file.
		again, err2 := exec.CommandContext(ctx, bin, model, "preprocess", "off", "cuts", "off", "solve").CombinedOutput()
		if err2 == nil && strings.Contains(strings.ToLower(string(again)), "infeasible") {
			return Infeasible, 0, nil
		}
		return "", 0, fmt.Errorf("cbc: %w\n%s", err, out)
	}
	data, err := os.ReadFile(sol)
	if err != nil {
		if strings.Contains(string(out), "infeasible") {
			return Infeasible, 0, nil
		}
		return "", 0, fmt.Errorf("cbc wrote no solution: %w\n%s", err, out)
	}
	first, _, _ := strings.Cut(string(data), "\n")
	switch {
	case strings.HasPrefix(first, "Optimal"):
		i := strings.LastIndex(first, " ")
		v, err := strconv.ParseFloat(strings.TrimSpace(first[i+1:]), 64)
		if err != nil {
			return "", 0, fmt.Errorf("cbc solution header %q: %w", first, err)
		}
		return Optimal, v, nil
	case strings.Contains(first, "nfeasible"):
		return Infeasible, 0, nil
	}
	return "", 0, fmt.Errorf("cbc: %s", first)
}
