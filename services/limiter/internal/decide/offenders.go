package decide

import (
	"fmt"
	"time"

	"github.com/tollgate/tollgate/services/limiter/internal/offenders"
)

// DefaultOffendersWindow is the interval of the offenders report unless
// NewOffenders is told otherwise.
const DefaultOffendersWindow = time.Minute

// Offenders counts enforced refusals by (policy, key) for GET
// /admin/offenders; every transport records into the same one through the
// Decider. It is safe for concurrent use.
type Offenders struct {
	tracker *offenders.Tracker
	raw     bool              // keys listed as sent, not as the access log's hash
	hasher  *offenders.Hasher // names keys in the report and the access log
}

// NewOffenders returns an empty Offenders whose report covers the current
// and previous window (0 means DefaultOffendersWindow); raw lists keys as
// sent instead of hashed with hasher (nil: a hasher with a random secret,
// whose names hold for this process only).
func NewOffenders(window time.Duration, raw bool, hasher *offenders.Hasher) (*Offenders, error) {
	if window == 0 {
		window = DefaultOffendersWindow
	}
	t, err := offenders.NewTracker(window, offenders.DefaultCapacity)
	if err != nil {
		return nil, fmt.Errorf("decide: %w", err)
	}
	if hasher == nil {
		if hasher, err = offenders.NewHasher(""); err != nil {
			return nil, fmt.Errorf("decide: %w", err)
		}
	}
	return &Offenders{tracker: t, raw: raw, hasher: hasher}, nil
}

// Record counts one refusal of subject by policy at now, under the key form
// the report shows. A nil *Offenders records nothing.
func (o *Offenders) Record(now time.Time, policy, subject string) {
	if o == nil {
		return
	}
	key := subject
	if !o.raw {
		key = o.hasher.Sum(subject)
	}
	o.tracker.Record(now, offenders.Item{Policy: policy, Key: key})
}

// Report returns the pairs refused most in the current and previous
// interval at now.
func (o *Offenders) Report(now time.Time) offenders.Report { return o.tracker.Report(now) }

// RawKeys reports whether keys are listed as sent rather than hashed.
func (o *Offenders) RawKeys() bool { return o.raw }

// Hash returns the name of a client key that the access log and the
// offenders report show, so that lines about one client can be matched
// without showing the key: a keyed hash (HMAC), which nobody without the
// secret can reverse by enumerating addresses or user ids. Without
// offenders (a nil *Offenders: the decision layer records nothing) there is
// no hasher, and no client is named: "".
func (o *Offenders) Hash(key string) string {
	if o == nil {
		return ""
	}
	return o.hasher.Sum(key)
}
