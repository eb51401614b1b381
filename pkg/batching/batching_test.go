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

func TestChunks(t *testing.T) {
	for _, tc := range []struct{ items, maxBatch, want int }{
		{0, 8, 0}, {1, 8, 1}, {8, 8, 1}, {9, 8, 2}, {17, 8, 3}, {5, 1, 5},
	} {
		if got := Chunks(tc.items, tc.maxBatch); got != tc.want {
			t.Errorf("Chunks(%d, %d) = %d, want %d", tc.items, tc.maxBatch, got, tc.want)
		}
	}
}
