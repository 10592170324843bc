package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// ProblemContentType is the media type of every error answer (RFC 9457).
const ProblemContentType = "application/problem+json"

// ProblemTypePrefix starts every problem type URI; the slug follows.
const ProblemTypePrefix = "urn:tollgate:problem:"

// problemSlugs maps each status Tollgate answers with to its problem type's
// slug.
var problemSlugs = map[int]string{
	http.StatusBadRequest:            "bad-request",
	http.StatusUnauthorized:          "unauthorized",
	http.StatusForbidden:             "forbidden",
	http.StatusNotFound:              "not-found",
	http.StatusMethodNotAllowed:      "method-not-allowed",
	http.StatusRequestEntityTooLarge: "payload-too-large",
	http.StatusUnprocessableEntity:   "validation-failed",
	http.StatusTooManyRequests:       "rate-limit-exceeded",
	http.StatusInternalServerError:   "internal",
	http.StatusServiceUnavailable:    "unavailable",
}

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Instance string `json:"instance,omitempty"`
}

// NewProblem returns the problem of status with detail: type
// urn:tollgate:problem:<slug>, title the status text. A status without a
// slug (one Tollgate never answers) becomes 500.
func NewProblem(status int, detail string) Problem {
	slug, ok := problemSlugs[status]
	if !ok {
		status, slug = http.StatusInternalServerError, problemSlugs[http.StatusInternalServerError]
	}
	return Problem{Type: ProblemTypePrefix + slug, Title: http.StatusText(status), Status: status, Detail: detail}
}

// LimitedProblem is the 429 answer: a Problem with the refusing policy's
// numbers. Durations are seconds.
type LimitedProblem struct {
	Problem
	ViolatedPolicies []string `json:"violated-policies"`
	Limit            int64    `json:"limit"`
	Remaining        int64    `json:"remaining"`
	ResetAfter       float64  `json:"reset_after"`
	RetryAfter       float64  `json:"retry_after"`
}

// NewLimitedProblem returns the 429 problem for policy p's refusal d.
func NewLimitedProblem(p limiter.Policy, d limiter.Decision) LimitedProblem {
	return LimitedProblem{
		Problem: NewProblem(http.StatusTooManyRequests,
			"rate limit of "+strconv.FormatInt(p.Limit, 10)+" per "+p.Window.String()+" exceeded for policy "+strconv.Quote(p.Name)),
		ViolatedPolicies: []string{p.Name},
		Limit:            d.Limit,
		Remaining:        d.Remaining,
		ResetAfter:       Seconds(d.ResetAfter),
		RetryAfter:       Seconds(d.RetryAfter),
	}
}

// WriteProblem answers status with body (a Problem, a LimitedProblem or
// another problem type) as application/problem+json, never cached.
func WriteProblem(w http.ResponseWriter, status int, body any) {
	data, err := json.Marshal(body)
	if err != nil { // cannot happen for the problem types; answer without a body
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	hd := w.Header()
	hd["Content-Type"] = []string{ProblemContentType}
	hd["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// WriteLimited answers 429 for policy p's refusal d: Retry-After and the
// LimitedProblem, with instance (may be empty) as its instance member.
func WriteLimited(w http.ResponseWriter, p limiter.Policy, d limiter.Decision, instance string) {
	WriteRefused(w, http.StatusTooManyRequests, p, d, instance)
}

// WriteRefused is WriteLimited answering status instead of 429, for a
// caller that takes only some statuses as a refusal (nginx's auth_request
// takes 401 and 403): the same Retry-After and problem, whose status member
// is status.
func WriteRefused(w http.ResponseWriter, status int, p limiter.Policy, d limiter.Decision, instance string) {
	SetRetryAfter(w.Header(), d.RetryAfter)
	body := NewLimitedProblem(p, d)
	body.Status = status
	body.Instance = instance
	WriteProblem(w, status, body)
}

// UnavailableDetail is the detail of the 503 problem answered when the store
// could not decide.
const UnavailableDetail = "the rate-limit store could not decide; retry later"

// WriteUnavailable answers 503 because the store could not decide:
// Retry-After: 1 and the unavailable problem, with instance (may be empty).
func WriteUnavailable(w http.ResponseWriter, instance string) {
	w.Header()["Retry-After"] = []string{"1"}
	p := NewProblem(http.StatusServiceUnavailable, UnavailableDetail)
	p.Instance = instance
	WriteProblem(w, http.StatusServiceUnavailable, p)
}
