package config

import (
	"fmt"

	"github.com/tollgate/tollgate/services/limiter/internal/identity"
)

// checkKeySources refuses a key source of --ping-key or --rate-key whose
// input the rest of the configuration leaves missing, since it could never
// apply: api_key without --api-keys-file (every X-Api-Key would be judged
// against no key at all), and header or user under --identity-headers
// trusted-proxies without --trusted-proxies (the header would be believed
// from nobody). Load runs it, so a reload is refused the same way; the
// error names the setting as from says the user wrote it.
func (c *Config) checkKeySources(from map[string]source) error {
	for _, route := range []struct {
		name    string
		sources []identity.Source
	}{{"ping-key", c.PingKey}, {"rate-key", c.RateKey}} {
		field := ""
		for _, s := range settings {
			if s.name == route.name {
				field = s.field(from[route.name])
			}
		}
		for _, s := range route.sources {
			switch {
			case s == identity.APIKey && c.APIKeysFile == "":
				return &Error{Field: field, Reason: "api_key needs --api-keys-file (the digests of the accepted X-Api-Key values): without it every X-Api-Key would be refused (401)"}
			case (s == identity.Header || s == identity.User) && c.IdentityHeaders == identity.HeadersFromTrustedProxies && len(c.TrustedProxies) == 0:
				return &Error{Field: field, Reason: fmt.Sprintf("%s needs --trusted-proxies under --identity-headers trusted-proxies: without a trusted proxy %s is believed from nobody", s, s.Input())}
			}
		}
	}
	return nil
}
