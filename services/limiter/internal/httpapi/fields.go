package httpapi

import (
	"net/http"
	"strconv"

	"github.com/tollgate/tollgate/services/limiter/internal/decide"
)

// The rate-limit header fields, in the canonical form net/http gives them
// (what Header.Set would store and what goes on the wire), so that the hot
// path assigns them without canonicalising each key again.
const (
	fieldPolicy    = "Ratelimit-Policy"
	fieldRateLimit = "Ratelimit"
	fieldLimit     = "X-Ratelimit-Limit"
	fieldRemaining = "X-Ratelimit-Remaining"
	fieldReset     = "X-Ratelimit-Reset"
)

// setLimitFields sets the RateLimit-Policy field and, when a policy is
// shown, the RateLimit and X-RateLimit-* fields of hv. Nothing is set when
// every policy is a shadow. The values share one allocation.
func setLimitFields(hd http.Header, hv decide.Header) {
	if hv.Policy == "" {
		return
	}
	if hv.RateLimit == "" {
		hd[fieldPolicy] = []string{hv.Policy}
		return
	}
	v := [...]string{
		hv.Policy,
		hv.RateLimit,
		strconv.FormatInt(hv.Limit, 10),
		strconv.FormatInt(hv.Remaining, 10),
		strconv.FormatInt(hv.Reset, 10),
	}
	vals := v[:] // one backing array for the five one-value slices
	hd[fieldPolicy] = vals[0:1:1]
	hd[fieldRateLimit] = vals[1:2:2]
	hd[fieldLimit] = vals[2:3:3]
	hd[fieldRemaining] = vals[3:4:4]
	hd[fieldReset] = vals[4:5:5]
}

// codeClasses are the code_class label values, by status/100.
var codeClasses = [...]string{"0xx", "1xx", "2xx", "3xx", "4xx", "5xx"}

// codeClass returns the code_class label of status ("2xx"), without
// formatting it for the statuses HTTP defines.
func codeClass(status int) string {
	if i := status / 100; i >= 0 && i < len(codeClasses) {
		return codeClasses[i]
	}
	return strconv.Itoa(status/100) + "xx"
}
