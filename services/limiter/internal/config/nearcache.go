package config

import (
	"fmt"
	"strconv"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/pkg/limiter/nearcache"
)

// NearCacheOf reports whether the redis store's near cache answers p's
// repeated refusals: the policy's near_cache setting, else on for the
// algorithms whose refusals change no state (all but fixed_window, which
// counts refused attempts too).
func (c Config) NearCacheOf(p limiter.Policy) bool {
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
