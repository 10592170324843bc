// Package limiter decides whether a request may pass a rate limit.
//
// The package holds the shared vocabulary of Tollgate: a [Policy] names an
// [Algorithm], a limit and a window; a [Key] names one counter under a
// policy; a [Store] keeps the counters and returns a [Decision] for every
// attempt. Stores live in their own packages (memstore, sqlitestore,
// redisstore) and this root package imports none of them.
//
// # Algorithms
//
//   - [FixedWindow]: one counter per (key, window start), the window start being
//     now truncated to a multiple of the window in UTC. Every attempt adds its
//     cost, refused ones too; an attempt is refused when the count after the
//     increment exceeds the limit. Up to twice the limit can pass in one
//     window-length span that straddles a boundary.
//   - [SlidingLog]: one event per admitted unit; an attempt is refused when the
//     units recorded in (now-window, now] plus its cost exceed the limit, and a
//     refused attempt is not recorded. Exact, O(limit) memory per key.
//   - [SlidingWindow]: the weighted two-bucket counter (previous window's count
//     weighted by its overlap with the sliding window, plus the current
//     count). Refused attempts are not counted. Approximate, see
//     [SlidingWindowDecide] for its error bound.
//   - [TokenBucket]: GCRA, one theoretical arrival time per key; limit units
//     per window on average with a burst of limit.
//   - [SlidingLogUnsafe]: seed 001's check-then-insert (docs/seeds.md) done as two separate
//     steps with no transaction. It over-admits under concurrency on purpose,
//     to demonstrate the race; never use it to protect anything.
//
// # Time
//
// Nothing here reads the wall clock on its own: every decision takes the
// current time as an argument (a [Request]'s Now) or from an injected
// [Clock], so tests script time as data and never sleep. All times are UTC.
//
// # Guarantees
//
// Every [Store] makes each decision atomically: two concurrent attempts on one
// key can never both observe the same remaining budget. For a store shared by
// several processes (SQLite file, Redis) the guarantee holds across processes.
// A denial is a [Decision] with Allowed false, never an error; errors mean the
// store could not decide.
package limiter
