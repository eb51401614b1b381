package batching

import "testing"

func TestMore(t *testing.T) {
	for _, tc := range []struct{ maxBatch, taken, pending, want int }{
		{8, 1, 0, 0},   // nothing waiting: run the first alone
		{8, 1, 3, 3},   // all that waits fits
		{8, 1, 20, 7},  // one per free slot
		{8, 0, 20, 8},  // the first was dropped: every slot is free
		{4, 6, 10, 0},  // the first message alone overfills the batch
		{1, 1, 100, 0}, // batch size 1
	} {
		if got := More(tc.maxBatch, tc.taken, tc.pending); got != tc.want {
			t.Errorf("More(%d, %d, %d) = %d, want %d", tc.maxBatch, tc.taken, tc.pending, got, tc.want)
		}
	}
}

func TestHandBack(t *testing.T) {
	for _, tc := range []struct {
		delivered uint64
		want      bool
	}{
		{1, true},  // a first delivery goes back to the queue
		{2, true},  // a second too
		{3, false}, // a third is carried
		{7, false}, // whatever the reason for its deliveries
	} {
		if got := HandBack(tc.delivered); got != tc.want {
			t.Errorf("HandBack(%d) = %v, want %v", tc.delivered, got, tc.want)
		}
	}
}

func TestFits(t *testing.T) {
	for _, tc := range []struct {
		maxBatch, taken, items int
		want                   bool
	}{
		{8, 0, 1, true},   // the first message
		{8, 0, 20, true},  // the first message, alone larger than the batch: it runs in chunks
		{8, 5, 3, true},   // fills the batch exactly
		{8, 5, 4, false},  // would overfill it: not in this batch
		{8, 8, 1, false},  // the batch is full
		{1, 1, 1, false},  // batch size 1
		{16, 3, 13, true}, // a message of several items
	} {
		if got := Fits(tc.maxBatch, tc.taken, tc.items); got != tc.want {
			t.Errorf("Fits(%d, %d, %d) = %v, want %v", tc.maxBatch, tc.taken, tc.items, got, tc.want)
		}
	}
}

func TestChunks(t *testing.T) {
	for _, tc := range []struct{ items, maxBatch, want int }{
		{0, 8, 0}, {1, 8, 1}, {8, 8, 1}, {9, 8, 2}, {17, 8, 3}, {5, 1, 5},
	} {
		if got := Chunks(tc.items, tc.maxBatch); got != tc.want {
			t.Errorf("Chunks(%d, %d) = %d, want %d", tc.items, tc.maxBatch, got, tc.want)
		}
	}
}
