// Refusals: their reply status, how they are counted and logged.

package frontend

import (
	"errors"
	"log/slog"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// refusalStatus is the reply status of a refused request: overloaded when load is the cause (the client may retry
// at once elsewhere, or later), else error.
func refusalStatus(err error) string {
	if errors.Is(err, ErrOverloaded) {
		return wire.StatusOverloaded
	}
	return wire.StatusError
}

// Log keys of refusals, by kind: a bounded set, each rate-limited on its own.
var refusalLogKeys = []struct {
	kind  error
	key   string
	level slog.Level
}{
	{ErrBadRequest, "refused a bad request", slog.LevelWarn},
	{ErrTooLarge, "refused a request over the size limit", slog.LevelWarn},
	{ErrUnknownPipeline, "refused a request for an unknown pipeline", slog.LevelWarn},
	{ErrOverloaded, "refused a request: overloaded", slog.LevelWarn},
	{ErrUnavailable, "refused a request: unavailable", slog.LevelError},
	{ErrInternal, "refused a request: internal error", slog.LevelError},
}

// noteRefusal counts a refusal and logs it, rate-limited.
func (f *Frontend) noteRefusal(pipelineName string, err error) {
	f.refused.Add(1)
	f.measureRefusal(pipelineName, refusalStatus(err))
	if errors.Is(err, ErrOverloaded) {
		f.overloaded.Add(1)
	}
	key, level := "refused a request", slog.LevelWarn
	for _, k := range refusalLogKeys {
		if errors.Is(err, k.kind) {
			key, level = k.key, k.level
			break
		}
	}
	f.complaints.Log(level, key, "pipeline", pipelineName, "err", err)
}
