package config

import (
	"fmt"
	"strconv"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/nearcache"
)

// NearCacheOf reports whether the redis store's near cache answers p's
// repeated refusals: never for an on_store_error local policy (while Redis
// is down its refusals come from this instance's memory store, and must not
// outlive the outage), else the policy's near_cache setting, else on for
// the algorithms whose refusals change no state (all but fixed_window,
// which counts refused attempts too).
func (c Live) NearCacheOf(p limiter.Policy) bool {
	if c.StoreErrorModeOf(p.Name) == Local {
		return false
	}
	if on, ok := c.NearCache[p.Name]; ok {
		return on
	}
	return nearcache.DefaultEnabled(p)
}

// setNearCache records policy's near_cache value text.
func (c *Config) setNearCache(policy, text string) error {
	on, err := strconv.ParseBool(text)
	if err != nil {
		return fmt.Errorf("%q is not true or false", text)
	}
	if c.NearCache == nil {
		c.NearCache = map[string]bool{}
	}
	c.NearCache[policy] = on
	return nil
}
