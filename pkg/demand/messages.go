package demand

// MessageSize estimates, per key ("pipeline:task/variant"), how many items a variant's task messages hold: the
// tuner sees a queue in messages (what JetStream counts) and turns them into items with it. It averages what the
// workers counted since their previous heartbeats (Counters' deltas) with the weight Alpha per tick, so a worker
// that is gone weighs nothing once its last interval has aged, and a change in how messages are made shows within
// seconds. Not safe for concurrent use.
type MessageSize struct {
	Alpha   float64
	pending map[string][2]uint64 // items, messages since the last tick
	est     map[string]float64
}

// NewMessageSize returns an estimator that knows no variant; alpha 0 means 0.3.
func NewMessageSize(alpha float64) *MessageSize {
	if alpha <= 0 || alpha > 1 {
		alpha = 0.3
	}
	return &MessageSize{Alpha: alpha, pending: map[string][2]uint64{}, est: map[string]float64{}}
}

// Observe adds a heartbeat's counts for key.
func (m *MessageSize) Observe(key string, d Delta) {
	if d.Messages == 0 {
		return
	}
	p := m.pending[key]
	m.pending[key] = [2]uint64{p[0] + d.Items, p[1] + d.Messages}
}

// Tick folds the counts observed since the previous tick into the averages.
func (m *MessageSize) Tick() {
	for key, p := range m.pending {
		size := float64(p[0]) / float64(p[1])
		if old, ok := m.est[key]; ok {
			size = m.Alpha*size + (1-m.Alpha)*old
		}
		m.est[key] = max(size, 1)
	}
	clear(m.pending)
}

// Of is the items per message at key: 1 before any was counted (a message holds at least one item).
func (m *MessageSize) Of(key string) float64 {
	if v, ok := m.est[key]; ok {
		return v
	}
	return 1
}
