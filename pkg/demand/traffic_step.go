package demand

// ForgetGaps drops the gaps kept so far: the caller's demand estimate moved at once (a step of the load), and the
// gaps of the load before it do not describe the one after. Kept, half a minute of a 100 QPS load's gaps replayed
// with a few seconds of 600 QPS's at 600 QPS made arrivals far burstier than either, and the plan check tightened
// the traffic example's plans after a step from 100 to 600 QPS to 0.28-0.31 of accuracy where 0.37 held its
// deadlines (docs/adaptation.md). The sub-request histograms stay: a step of the demand does not change the fan-out.
func (t *Traffic) ForgetGaps() {
	clear(t.gaps)
}
