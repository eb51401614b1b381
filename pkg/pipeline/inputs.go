package pipeline

import (
	"fmt"
	"strings"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// CheckInputs checks the tensors a request (the root task's item) carries: each well-formed (wire.ValidateTensors:
// a shape's product is checked for overflow, the data against it) and, when the spec declares its inputs, each one
// declared, with the declared datatype and shape (-1: a dimension of any size), and every declared name present
// once. A name declared more than once, with different datatypes, takes any one of them. The frontend checks a
// request with it, and a worker every item of a root task message (anyone allowed to publish may have sent it).
func (s *Spec) CheckInputs(ts []wire.Tensor) error {
	if err := wire.ValidateTensors(ts); err != nil {
		return err
	}
	if len(s.Inputs) == 0 {
		return nil
	}
	seen := make(map[string]int, len(ts))
	for i, t := range ts {
		if j, dup := seen[t.Name]; dup {
			return fmt.Errorf("inputs[%d]: tensor %q is also inputs[%d]", i, t.Name, j)
		}
		seen[t.Name] = i
		if err := s.checkDeclared(t); err != nil {
			return fmt.Errorf("inputs[%d]: %v", i, err)
		}
	}
	for _, d := range s.Inputs {
		if _, ok := seen[d.Name]; !ok {
			return fmt.Errorf("no input %q: pipeline %s takes %s", d.Name, s.Name, declaredList(s.Inputs, ", "))
		}
	}
	return nil
}

// checkDeclared checks one tensor against the declarations of its name.
func (s *Spec) checkDeclared(t wire.Tensor) error {
	var named []TensorSpec
	for _, d := range s.Inputs {
		if d.Name != t.Name {
			continue
		}
		named = append(named, d)
		if d.Datatype == t.Datatype && d.ShapeFits(t.Shape) {
			return nil
		}
	}
	if len(named) == 0 {
		return fmt.Errorf("tensor %q is not an input of pipeline %s, which takes %s", t.Name, s.Name, declaredList(s.Inputs, ", "))
	}
	return fmt.Errorf("tensor %q is %s%v; pipeline %s takes %s", t.Name, t.Datatype, t.Shape, s.Name, declaredList(named, " or "))
}

// ShapeFits says whether shape is one the declaration allows: as many dimensions, each the declared size or any
// size where the declaration says -1.
func (d TensorSpec) ShapeFits(shape []int64) bool {
	if len(shape) != len(d.Shape) {
		return false
	}
	for i, n := range d.Shape {
		if n != -1 && shape[i] != n {
			return false
		}
	}
	return true
}

// declaredList spells declarations for an error, joined by sep: "image BYTES[1] or image UINT8[-1 -1 3]".
func declaredList(ds []TensorSpec, sep string) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%s %s%v", d.Name, d.Datatype, d.Shape)
	}
	return strings.Join(parts, sep)
}
