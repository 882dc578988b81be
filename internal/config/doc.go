// Package config loads the service configuration (docs/configuration.md): strict YAML
// (unknown keys, and keys that do not apply, are errors), overridden by
// AGGREGATOR_* environment variables, defaulted, then validated. Every
// error Load and Parse return wraps ErrInvalid, and most are a *KeyError
// naming the key and the offending value. A Config returned by Load is
// complete: other packages use it as given and never re-check it, except
// that the Kafka keys are checked by ValidateKafka, since replay needs none.
// Warnings are what run and validate warn of and accept (an http.listen on
// a loopback address). CheckEnv reports AGGREGATOR_* variables that
// override no key.
//
// Key names and YAML enum strings live here only: the other packages ask
// a Config what its enums say through its methods (enums.go), and a config
// error found at run time (SessionTimeoutRefused) is made here too.
package config
