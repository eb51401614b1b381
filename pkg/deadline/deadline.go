// Package deadline holds the decisions workers make about items running late. Pure: the live workers and the
// simulator call the same functions.
package deadline

import "time"

// Expired reports whether an item whose request is due at deadline can no longer be served at now: such an item is
// dropped before it is executed, and its frontend told.
func Expired(now, deadline time.Time) bool { return !now.Before(deadline) }
