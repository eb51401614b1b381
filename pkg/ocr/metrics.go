package ocr

import (
	"sort"
	"strings"
)

// MatchIoU is the least IoU at which a detected box counts as finding a ground-truth line.
const MatchIoU = 0.5

// MatchLines pairs detected boxes with ground-truth lines one to one, best IoU first, at IoU >= MatchIoU. It returns,
// per ground-truth line, the index of its detected box or -1.
func MatchLines(detected []Box, truth []Line) []int {
	type pair struct {
		g, d int
		iou  float64
	}
	var pairs []pair
	for g, l := range truth {
		for d, b := range detected {
			if iou := IoU(l.Box, b); iou >= MatchIoU {
				pairs = append(pairs, pair{g, d, iou})
			}
		}
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i].iou > pairs[j].iou })
	match := make([]int, len(truth))
	for i := range match {
		match[i] = -1
	}
	used := make([]bool, len(detected))
	for _, p := range pairs {
		if match[p.g] < 0 && !used[p.d] {
			match[p.g], used[p.d] = p.d, true
		}
	}
	return match
}

// Read is one line as the pipeline read it: its box and its text.
type Read struct {
	Box  Box
	Text string
}

// PageScore is how well one image was read, end to end.
type PageScore struct {
	Found, Detected, Lines int // ground-truth lines found, boxes detected, ground-truth lines
	ExactLines             int // ground-truth lines found and read exactly
	CharAccuracy           float64
}

// ScorePage compares what the pipeline read in an image with its ground truth: detection (lines found at
// IoU >= 0.5), lines read exactly, and the character accuracy of the whole page (the lines in reading order, one per
// row of text, against the true lines).
func ScorePage(reads []Read, truth []Line) PageScore {
	boxes := make([]Box, len(reads))
	for i, r := range reads {
		boxes[i] = r.Box
	}
	s := PageScore{Detected: len(reads), Lines: len(truth)}
	for g, d := range MatchLines(boxes, truth) {
		if d < 0 {
			continue
		}
		s.Found++
		if reads[d].Text == truth[g].Text {
			s.ExactLines++
		}
	}
	s.CharAccuracy = CharAccuracy(PageText(reads), TruthText(truth))
	return s
}

// PageText joins what was read in reading order: boxes on one row with a space, rows with a newline.
func PageText(reads []Read) string {
	rs := append([]Read(nil), reads...)
	boxes := make([]Box, len(rs))
	for i := range rs {
		boxes[i] = rs[i].Box
	}
	order := make([]int, len(rs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return readingBefore(boxes[order[a]], boxes[order[b]]) })
	var sb strings.Builder
	for k, i := range order {
		if k > 0 {
			if sameRow(boxes[order[k-1]], boxes[i]) {
				sb.WriteByte(' ')
			} else {
				sb.WriteByte('\n')
			}
		}
		sb.WriteString(rs[i].Text)
	}
	return sb.String()
}

// TruthText is the ground truth of a page, one line per row.
func TruthText(truth []Line) string {
	texts := make([]string, len(truth))
	for i, l := range truth {
		texts[i] = l.Text
	}
	return strings.Join(texts, "\n")
}
