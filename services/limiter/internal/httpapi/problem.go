package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/httplimit"
)

// problem is a handler's error answer; writeProblem writes it. Handlers
// return one instead of writing it themselves.
type problem struct {
	status int
	// slug, when set, names the problem type instead of the status's slug.
	slug   string
	detail string
	// retryAfter, when not empty, is the Retry-After field of the answer.
	retryAfter string
	// cause, when set, is logged (a store error).
	cause error
	// refusal, when set, makes the answer the library's 429 problem, as
	// its middleware answers (detail and retryAfter are its own), in
	// status (429 unless a forward-auth caller asked for another).
	refusal *refusal
}

// refusal is the policy that refused and its decision.
type refusal struct {
	policy   limiter.Policy
	decision limiter.Decision
}

// fail returns a problem of status with detail.
func fail(status int, detail string) *problem { return &problem{status: status, detail: detail} }

// unavailable is the answer when the store could not decide (err); the
// decision layer has counted it. A request shed by this instance (the
// decision could not even be sent in time) is overloaded instead; a client
// that went away gets an answer nobody reads, and no log line.
func unavailable(err error) *problem {
	switch {
	case errors.Is(err, context.Canceled):
		return fail(http.StatusServiceUnavailable, "the request was cancelled")
	case errors.Is(err, limiter.ErrOverloaded):
		return &problem{
			status:     http.StatusServiceUnavailable,
			slug:       "overloaded",
			detail:     "this instance is overloaded: the decision could not be made in time; retry later",
			retryAfter: "1",
		}
	}
	return &problem{
		status:     http.StatusServiceUnavailable,
		detail:     httplimit.UnavailableDetail,
		retryAfter: "1",
		cause:      err,
	}
}

// internalError is the answer to a failure the client cannot fix.
func internalError() *problem {
	return fail(http.StatusInternalServerError, "internal error; the request id identifies it in the logs")
}

// limited is the 429 answer for policy p's refusal d.
func limited(p limiter.Policy, d limiter.Decision) *problem {
	return &problem{status: http.StatusTooManyRequests, refusal: &refusal{policy: p, decision: d}}
}
