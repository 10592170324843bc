package config

import "fmt"

// StoreErrorMode says what a policy's decisions become while the store
// cannot decide (Redis down or too slow, its circuit breaker open). It is
// set per policy with the YAML key on_store_error.
type StoreErrorMode string

// The store-error modes.
const (
	// FailClosed refuses: the request gets 503 unavailable. The default.
	FailClosed StoreErrorMode = "fail_closed"
	// FailOpen allows without counting anything.
	FailOpen StoreErrorMode = "fail_open"
	// Local decides with an in-process memory store holding the same
	// policy: every instance then limits on its own.
	Local StoreErrorMode = "local"
)

// StoreErrorModeOf returns the mode of the named policy: the one the
// configuration sets, else FailClosed.
func (c Live) StoreErrorModeOf(policy string) StoreErrorMode {
	if m, ok := c.OnStoreError[policy]; ok {
		return m
	}
	return FailClosed
}

// setStoreErrorMode records policy's on_store_error value text.
func (c *Config) setStoreErrorMode(policy, text string) error {
	m := StoreErrorMode(text)
	switch m {
	case FailClosed, FailOpen, Local:
	default:
		return fmt.Errorf("%q is not one of fail_closed, fail_open, local", text)
	}
	if c.OnStoreError == nil {
		c.OnStoreError = map[string]StoreErrorMode{}
	}
	c.OnStoreError[policy] = m
	return nil
}
