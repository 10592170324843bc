package main

import (
	"context"
	"net/http"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// schedulePacer is a vegeta pacer that sends hit i at the absolute wall-clock
// instant s[i] (or at once when that is past) and stops after the last one.
// It lets an attack line up with the service's Unix-aligned windows.
type schedulePacer []time.Time

var _ vegeta.Pacer = schedulePacer(nil)

// Pace implements vegeta.Pacer.
func (s schedulePacer) Pace(_ time.Duration, hits uint64) (time.Duration, bool) {
	if hits >= uint64(len(s)) {
		return 0, true
	}
	return max(0, time.Until(s[hits])), false
}

// Rate implements vegeta.Pacer: the mean rate over the schedule, in hits per
// second.
func (s schedulePacer) Rate(time.Duration) float64 {
	if len(s) < 2 {
		return 0
	}
	return float64(len(s)-1) / s[len(s)-1].Sub(s[0]).Seconds()
}

// attackSpec is one vegeta attack.
type attackSpec struct {
	Name     string
	Targeter vegeta.Targeter
	Pacer    vegeta.Pacer
	Duration time.Duration // 0: until the pacer stops
	Workers  uint64        // workers started up front
	Max      uint64        // most workers vegeta may add when all are busy; 0: no bound
}

// attack runs spec with client's connections and returns the results sorted
// by send time. It stops early when ctx ends. Every result is counted on
// prog when prog is not nil.
func attack(ctx context.Context, client *http.Client, spec attackSpec, prog *progress) vegeta.Results {
	opts := []func(*vegeta.Attacker){vegeta.Client(client), vegeta.Workers(spec.Workers)}
	if spec.Max > 0 {
		opts = append(opts, vegeta.MaxWorkers(spec.Max))
	}
	a := vegeta.NewAttacker(opts...)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			a.Stop()
		case <-done:
		}
	}()
	var rs vegeta.Results
	for r := range a.Attack(spec.Targeter, spec.Pacer, spec.Duration, spec.Name) {
		rs.Add(r)
		if prog != nil {
			prog.Add(1)
		}
	}
	rs.Close()
	return rs
}
