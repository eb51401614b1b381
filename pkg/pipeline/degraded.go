package pipeline

// AnsweredAccuracyOf is the accuracy of an answer whose hops are path: a root-to-leaf path's (PathAccuracyOf), and
// 0 for a path that stops above a leaf task (an answer degraded to what an earlier task made, deadline policy
// degrade): the tasks it skipped count as answered wrong, so that degrading never raises the accuracy reported.
func (s *Spec) AnsweredAccuracyOf(path []string) float64 {
	if len(path) == 0 {
		return 0
	}
	t, _ := s.Lookup(path[len(path)-1])
	if t == nil || len(t.Children) > 0 {
		return 0
	}
	return s.PathAccuracyOf(path)
}
