package chaos

import (
	"fmt"
	"io"
	"strings"
)

// FormatRow is a row as one line of text.
func FormatRow(r Row) string {
	if r.Skipped != "" {
		return fmt.Sprintf("%-20s skipped: %s", r.Fault, r.Skipped)
	}
	rec := "never"
	if r.RecoveryS >= 0 {
		rec = fmt.Sprintf("%.1f", r.RecoveryS)
	}
	result := "pass"
	if !r.Pass {
		result = "FAIL: " + strings.Join(r.Failures, "; ")
	}
	return fmt.Sprintf("%-20s %6d %6d %5d %4d %7.2f%% %7.2f%% %7s %3d  %s", r.Fault, r.Sent, r.OK, r.Lost, r.Duplicates,
		r.ViolationsPct, r.BaselinePct, rec, len(r.Crashes), result)
}

// WriteTable prints the rows as a text table, then each row's notes and crashes.
func WriteTable(w io.Writer, rows []Row) {
	fmt.Fprintf(w, "%-20s %6s %6s %5s %4s %8s %8s %7s %3s  %s\n", "fault", "sent", "ok", "lost", "dup", "viol",
		"baseline", "recov s", "crash", "result")
	for _, r := range rows {
		fmt.Fprintln(w, FormatRow(r))
	}
	for _, r := range rows {
		for _, n := range append(r.Notes, r.Crashes...) {
			fmt.Fprintf(w, "  %s: %s\n", r.Fault, n)
		}
	}
}

// WriteMarkdown prints the rows as docs/faults.md's table (the notes are in the text table and the JSON).
func WriteMarkdown(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| fault | sent | ok | lost | duplicates | violations (before the fault) | recovery s | crashes "+
		"| result |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, r := range rows {
		if r.Skipped != "" {
			fmt.Fprintf(w, "| %s | | | | | | | | skipped: %s |\n", r.Fault, r.Skipped)
			continue
		}
		rec := "never"
		if r.RecoveryS >= 0 {
			rec = fmt.Sprintf("%.1f", r.RecoveryS)
		}
		result := "pass"
		if !r.Pass {
			result = "fail: " + strings.Join(r.Failures, "; ")
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %.1f%% (%.1f%%) | %s | %d | %s |\n", r.Fault, r.Sent, r.OK, r.Lost,
			r.Duplicates, r.ViolationsPct, r.BaselinePct, rec, len(r.Crashes), result)
	}
}
