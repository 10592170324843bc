package config

import (
	"fmt"
	"strconv"
)

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
