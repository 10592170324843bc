package redisstore

import (
	_ "embed" // the scripts

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// The scripts live in lua/*.lua, embedded in the binary (a missing file is a
// compile error). Each decision script is prelude.lua, then
// window_helpers.lua for the window algorithms, then its own file.
var (
	// prelude reads the common arguments; int formats an integral number
	// without the exponent Lua's tostring would use above 1e14.
	//
	//go:embed lua/prelude.lua
	prelude string
	// windowHelpers serve the two window algorithms, whose state is one hash of
	// window start (Unix seconds) -> count. add keeps the current window, the
	// previous one (sliding_window's prev) and the one before, so that a client
	// clock stepping back by up to one window still finds its prev; trim drops
	// the older fields, which only a longer step back could reach. The whole hash
	// also expires two windows after its last write.
	//
	//go:embed lua/window_helpers.lua
	windowHelpers string
	//go:embed lua/fixed_window.lua
	fixedWindowLua string
	//go:embed lua/sliding_window.lua
	slidingWindowLua string
	//go:embed lua/sliding_log.lua
	slidingLogLua string
	//go:embed lua/token_bucket.lua
	tokenBucketLua string
	//go:embed lua/reset.lua
	resetLua string
)

// Each decision is one Lua script, run with EVALSHA (EVAL when the server
// answers NOSCRIPT, e.g. after SCRIPT FLUSH or a restart): one round trip,
// atomic on the server. The scripts decide and write; they return the state
// they read and the time they used, and the Go side rebuilds the Decision
// with the root package's arithmetic from exactly those values, so the two
// cannot drift apart in anything but the allow/deny that the script writes,
// which the tests compare against that arithmetic.
//
// Numbers. Lua numbers are doubles, exact only up to 2^53, and Unix
// nanoseconds (~1.8e18) are not. Times therefore travel as two integers,
// Unix seconds (floored) and nanoseconds in [0, 1e9), in client-time mode
// exactly as time.Time holds them; in server-time mode from TIME (seconds,
// microseconds × 1000). Windows are whole seconds (limiter.Policy.Validate),
// so window starts are whole seconds and fit a double. Every value a script
// adds or compares stays below 2^53: seconds, nanoseconds below 1e9, counts
// up to 2^31 plus costs, microsecond scores (~1.8e15). The one comparison
// that does not fit, sliding_window's prev×(w−elapsed) ≤ room×w in
// nanoseconds (up to 2^31 × 3.2e16 ≈ 2^86), is done exactly on base-2^24
// limbs (big_* below), the same comparison as limiter.SlidingWindowDecide's
// 128-bit one. We chose exact in-script arithmetic over "decide in Go, then
// compare-and-set" because the latter needs a read round trip before the
// write, cannot read the server's TIME first in server-time mode, and retries
// under contention, where rate limiting is hottest.
//
// Arguments of every decision script: KEYS[1] is the key's state;
// ARGV[1] Unix seconds ('' = read TIME), ARGV[2] nanoseconds, ARGV[3] window
// in seconds, ARGV[4] limit, ARGV[5] cost (0 = peek: nothing is written).
// Every script returns {now_s, now_ns, ...state read before the attempt}.

// fixedWindowScript counts every attempt, refused ones too, in the current
// window's field. Returns {now_s, now_ns, count before the attempt}.
var fixedWindowScript = redis.NewScript(prelude + windowHelpers + fixedWindowLua)

// slidingWindowScript adds an allowed attempt's cost to the current window.
// Returns {now_s, now_ns, previous window's count, current window's count},
// both before the attempt.
var slidingWindowScript = redis.NewScript(prelude + windowHelpers + slidingWindowLua)

// slidingLogScript keeps one sorted-set member per instant with admitted
// units, "<seconds>.<9-digit nanoseconds>:<units>", scored by Unix
// microseconds (exact in a double; members of one microsecond sort by their
// nanoseconds). ARGV[6] is the mode: "allow" decides and records an allowed
// attempt atomically; "check" only decides; "record" only records (the
// unsafe algorithm's second round trip). Counted are the events after
// now − window, future ones included (a clock stepping back hands out no
// fresh budget). Recording drops the events more than two windows old:
// a client clock stepping back by up to one window may still count those
// after now − window. Returns {now_s, now_ns, counted units, newest counted event
// (s, ns), and when refused the event whose departure frees enough units
// (s, ns) with the units counted up to and including it}.
var slidingLogScript = redis.NewScript(prelude + slidingLogLua)

// tokenBucketScript keeps the GCRA theoretical arrival time, and the time it
// was set (for the units a reset returns), as
// "<seconds>:<nanoseconds>:<set at s>:<set at ns>" (absent = 0, the Unix
// epoch, as limiter.TokenBucketDecide takes a new key; a value of the first
// two fields only is read as well). ARGV[6..7] is cost × emission
// interval and ARGV[8..9] the burst (limit × interval), each as (s, ns).
// Returns {now_s, now_ns, tat_s, tat_ns} with the tat read before the attempt.
var tokenBucketScript = redis.NewScript(prelude + tokenBucketLua)

// resetScript deletes KEYS and returns {units of their window counts and
// event costs, then the value of each bucket} (see resetUnits).
var resetScript = redis.NewScript(resetLua)

// scriptName names a decision script, as limiter.StoreCall.Script.
func scriptName(s *redis.Script) string {
	switch s {
	case fixedWindowScript:
		return string(limiter.FixedWindow)
	case slidingWindowScript:
		return string(limiter.SlidingWindow)
	case slidingLogScript:
		return string(limiter.SlidingLog)
	case tokenBucketScript:
		return string(limiter.TokenBucket)
	}
	return ""
}
