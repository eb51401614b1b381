// Watching the KV bucket: a watch that survives a lost connection, and a lost consumer.

package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sleipnir-serving/sleipnir/pkg/wire"
)

// watchProbe is how long a watch may be silent before WatchKV looks up the last revision of its keys, and how long a
// revision it found may stay undelivered before the watch is taken for lost. A watch's consumer lives on one server
// of a cluster; when that server stops (killed, or in lame-duck mode) while the client stays connected to another,
// the watch is silent, and nats.go recreates it only after two missed idle heartbeats of 5 s: for 10 to 20 s a
// planner heard no worker (and took them for gone), a worker no assignment, a frontend no plan. While a watch is
// silent and its probes find nothing it has not delivered, they space out to maxWatchProbe: a watch of keys that
// rarely change (a worker's assignment, the plans) costs one direct get every 4 s, and finds a lost consumer within
// 5 s of the next write.
const (
	watchProbe    = time.Second
	maxWatchProbe = 4 * watchProbe
)

// WatchKV calls fn for every current value of the keys matching keys, then for every change, in revision order,
// from one goroutine, until ctx is done. ready, if not nil, is called once, after the initial values. A watch does
// not survive a lost connection by itself: after a server restart its channel may stay open and silent. So WatchKV
// watches again, from the revision after the last one it delivered, whenever nc has reconnected, the channel
// closed, or the bucket holds a revision of keys that the watch has not delivered a watchProbe after it was found
// (its consumer was lost with the server that hosted it): nothing is missed and nothing is delivered twice.
func WatchKV(ctx context.Context, nc *nats.Conn, kv jetstream.KeyValue, keys string, fn func(jetstream.KeyValueEntry), ready func()) error {
	var last uint64
	backoff := 100 * time.Millisecond
	// Woken by a reconnection and by the next probe's time, not by a poll: a process watches several keys, and a
	// 250 ms poll of each kept every worker at rest waking (docs/measurements.md "A worker at rest").
	connected := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(connected)
	probe := time.NewTimer(watchProbe)
	defer probe.Stop()
	for ctx.Err() == nil {
		var opts []jetstream.WatchOpt
		if last > 0 {
			opts = append(opts, jetstream.ResumeFromRevision(last+1))
		}
		reconnects := nc.Stats().Reconnects
		w, err := kv.Watch(ctx, keys, opts...)
		if err != nil {
			slog.Debug("KV watch failed; retrying", "keys", keys, "err", err)
			if !sleep(ctx, backoff) {
				break
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		heard := time.Now()      // the watch's last delivery or probe, or its start
		probeEvery := watchProbe // the silence before the next probe
		var behind uint64        // a revision the last probe found that the watch had not delivered
		probe.Reset(probeEvery)
	watch:
		for {
			select {
			case <-ctx.Done():
				break watch
			case <-connected:
				if nc.Stats().Reconnects != reconnects {
					slog.Debug("connection re-established; watching again", "keys", keys, "after_revision", last)
					break watch
				}
			case <-probe.C:
				// A delivery moves heard without touching the timer: the timer, when it fires early, waits out
				// the rest of the silence.
				if silent := time.Since(heard); silent < probeEvery {
					probe.Reset(probeEvery - silent)
					continue
				}
				probe.Reset(probeEvery) // from here on, whatever the probe finds, until changed below
				if nc.Stats().Reconnects != reconnects {
					slog.Debug("connection re-established; watching again", "keys", keys, "after_revision", last)
					break watch
				}
				if behind > last {
					slog.Debug("KV watch lost (its consumer gone with a server); watching again", "keys", keys,
						"after_revision", last, "undelivered", behind)
					break watch
				}
				heard = time.Now()
				rev, err := LastRevision(ctx, nc, keys)
				if err != nil {
					slog.Debug("KV watch probe failed", "keys", keys, "err", err)
					continue
				}
				if behind = rev; behind > last {
					probeEvery = watchProbe // delivered within a watchProbe, or lost
				} else {
					probeEvery = min(2*probeEvery, maxWatchProbe)
				}
			case e, ok := <-w.Updates():
				if !ok {
					slog.Debug("KV watch closed; watching again", "keys", keys, "after_revision", last)
					if !sleep(ctx, backoff) {
						break watch
					}
					break watch
				}
				if probeEvery > watchProbe { // the timer is set for a longer silence than the next one
					probe.Reset(watchProbe)
				}
				heard, probeEvery = time.Now(), watchProbe
				if e == nil {
					if ready != nil {
						ready()
						ready = nil
					}
					continue
				}
				if e.Revision() <= last {
					continue
				}
				last = e.Revision()
				fn(e)
			}
		}
		_ = w.Stop()
	}
	return ctx.Err()
}

// LastRevision is the revision of the bucket's newest entry whose key matches keys (a put, a delete or a purge; 0:
// none), read by a direct get, which any server holding the bucket answers.
func LastRevision(ctx context.Context, nc *nats.Conn, keys string) (uint64, error) {
	req, err := json.Marshal(struct {
		LastBySubject string `json:"last_by_subj"`
	}{wire.KVSubject(keys)})
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, watchProbe)
	defer cancel()
	msg, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+wire.KVStream, req)
	if err != nil {
		return 0, err
	}
	switch status := msg.Header.Get("Status"); status {
	case "":
	case "404":
		return 0, nil
	default:
		return 0, fmt.Errorf("direct get of the last %s: status %s %s", keys, status, msg.Header.Get("Description"))
	}
	return strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
}
