package config

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/tollgate/tollgate/pkg/limiter"
)

// PoliciesLogValue describes each policy for a log line, one attribute per
// policy by name in order: "fixed_window 3 per 1m0s", with " shadow" for a
// shadow policy.
func PoliciesLogValue(ps map[string]limiter.Policy) slog.Value {
	attrs := make([]slog.Attr, 0, len(ps))
	for _, name := range slices.Sorted(maps.Keys(ps)) {
		p := ps[name]
		text := fmt.Sprintf("%s %d per %s", p.Algorithm, p.Limit, p.Window)
		if p.Shadow {
			text += " shadow"
		}
		attrs = append(attrs, slog.String(name, text))
	}
	return slog.GroupValue(attrs...)
}
