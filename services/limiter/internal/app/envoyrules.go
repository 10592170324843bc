package app

import (
	"errors"

	"github.com/tollgate/tollgate/pkg/limiter"
	"github.com/tollgate/tollgate/services/limiter/internal/config"
	"github.com/tollgate/tollgate/services/limiter/internal/envoyrules"
)

// loadEnvoyRules reads --envoy-config when set. It returns nil rules when
// none of --grpc-addr, --envoy-config and --envoy-xds-server is set, and
// empty rules (every descriptor answers OK) for a gRPC server without
// configuration or before xDS pushes the first version.
func loadEnvoyRules(cfg config.Config) (*envoyrules.Rules, error) {
	if cfg.EnvoyConfig == "" {
		if cfg.GRPCAddr == "" && cfg.EnvoyXDSServer == "" {
			return nil, nil
		}
		return envoyrules.NewRules(envoyOptions(cfg)), nil
	}
	return rulesInvalid(envoyrules.LoadDir(cfg.EnvoyConfig, envoyOptions(cfg)))
}

// rulesInvalid makes a problem of the Envoy rules (envoyrules.ErrRules) a
// configuration error (config.ErrInvalid): the service exits with status 2
// and a reload is refused, as for any other setting.
func rulesInvalid(rules *envoyrules.Rules, err error) (*envoyrules.Rules, error) {
	if errors.Is(err, envoyrules.ErrRules) {
		return rules, config.Invalid(err)
	}
	return rules, err
}

// envoyOptions are cfg's settings of the Envoy API.
func envoyOptions(cfg config.Config) envoyrules.Options {
	return envoyrules.Options{
		MergeDomains:               cfg.EnvoyMergeDomainConfig,
		ResponseHeaders:            cfg.EnvoyResponseHeaders,
		DynamicMetadata:            cfg.EnvoyResponseDynamicMetadata,
		StopIncrementWhenOverLimit: cfg.EnvoyStopIncrementWhenOverLimit,
		QuotaMode:                  cfg.EnvoyQuotaMode,
		LimitHeaders:               cfg.EnvoyLimitHeaders,
		LimitHeaderNames: envoyrules.LimitHeaderNames{
			Limit: cfg.EnvoyLimitLimitHeader, Remaining: cfg.EnvoyLimitRemainingHeader, Reset: cfg.EnvoyLimitResetHeader,
		},
		ShadowMode: cfg.EnvoyShadowMode,
	}
}

// envoyClash refuses policies of which one is named like one that rules
// (read from folder, or pushed by xDS when folder is empty) derive from an
// Envoy descriptor: the two would share counters. It runs at start and on
// every reload; rules may be nil.
func envoyClash(rules *envoyrules.Rules, policies map[string]limiter.Policy, folder string) error {
	if rules == nil {
		return nil
	}
	source := folder
	if source == "" {
		source = "the xDS version"
	}
	for _, p := range rules.Policies() {
		if _, clash := policies[p.Name]; clash {
			return &config.Error{Field: "policies." + p.Name, Reason: "an Envoy descriptor in " + source + " derives the same policy name; rename one"}
		}
	}
	return nil
}
