package config

import (
	"fmt"
	"strconv"
)

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

// boolSetter parses true/false (and the other spellings strconv.ParseBool
// accepts) into a Config field.
func boolSetter(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		*field(c) = b
		return nil
	}
}

// switchFlag is the flag.Value of a setting whose default is "false": given
// alone (--redis-client-time) it means true, and --name=false still works.
type switchFlag struct{ v *string }

func (f switchFlag) String() string {
	if f.v == nil {
		return ""
	}
	return *f.v
}

func (f switchFlag) Set(s string) error { *f.v = s; return nil }

// IsBoolFlag lets the flag package accept the flag without a value.
func (f switchFlag) IsBoolFlag() bool { return true }
