package demand

// EscalationEstimator smooths the escalation rates workers observe at cascades' first variants ("task/variant"):
// an exponentially weighted moving average of the items and escalated items of each reporting interval, as
// FanoutEstimator does for the multiplicative factors. Not safe for concurrent use.
type EscalationEstimator struct {
	// Alpha is the weight of the newest interval, in (0, 1]; MinItems how many (smoothed) items a variant must have
	// executed before its rate is reported.
	Alpha, MinItems float64

	items, escalated map[string]float64 // smoothed
	pendItems        map[string]uint64
	pendEscalated    map[string]uint64
}

// NewEscalationEstimator returns an estimator; alpha 0 means 0.3, minItems 0 means 20.
func NewEscalationEstimator(alpha, minItems float64) *EscalationEstimator {
	alpha, minItems = smoothingDefaults(alpha, minItems)
	return &EscalationEstimator{Alpha: alpha, MinItems: minItems, items: map[string]float64{},
		escalated: map[string]float64{}, pendItems: map[string]uint64{}, pendEscalated: map[string]uint64{}}
}

// Observe adds what a worker did at variant key since its previous heartbeat.
func (e *EscalationEstimator) Observe(key string, items, escalated uint64) {
	e.pendItems[key] += items
	e.pendEscalated[key] += escalated
}

// Tick folds the interval's counts into the averages; a variant that executed nothing keeps its average.
func (e *EscalationEstimator) Tick() {
	for key, n := range e.pendItems {
		if n == 0 {
			continue
		}
		if _, seen := e.items[key]; !seen {
			e.items[key], e.escalated[key] = float64(n), float64(e.pendEscalated[key])
			continue
		}
		a := e.Alpha
		e.items[key] = a*float64(n) + (1-a)*e.items[key]
		e.escalated[key] = a*float64(e.pendEscalated[key]) + (1-a)*e.escalated[key]
	}
	clear(e.pendItems)
	clear(e.pendEscalated)
}

// Rate is key's measured escalation rate, and whether enough items were seen for it to count.
func (e *EscalationEstimator) Rate(key string) (float64, bool) {
	n := e.items[key]
	if n < e.MinItems || n <= 0 {
		return 0, false
	}
	return min(1, e.escalated[key]/n), true
}
