package gc

import "time"

// Signals are optional notifications of what a Collector does, for tests
// that wait for a step instead of polling the database (after River's
// maintenance-service test signals). Every channel is optional; sends never
// block a run: a full channel drops the notification, so give tests a
// buffer larger than the events they wait for.
type Signals struct {
	// LeaseAcquired receives the holder's name each time a run takes the
	// lease.
	LeaseAcquired chan<- string
	// LeaseRenewed receives the time of each successful renewal.
	LeaseRenewed chan<- time.Time
	// RunFinished receives every run that ends (succeeded, failed or
	// skipped), after it is recorded.
	RunFinished chan<- Run
}

func signal[T any](ch chan<- T, v T) {
	if ch == nil {
		return
	}
	select {
	case ch <- v:
	default:
	}
}
