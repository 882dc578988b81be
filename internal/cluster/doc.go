// Package cluster connects the service to Kafka: kgo client options built
// from config.Source (seed brokers, TLS from PEM files, SASL PLAIN or
// SCRAM), a kgo.Logger that writes to zerolog, and the start-up topic
// checks (VerifyInputs, InputPartitions, EnsureOutputs, EnsureChangelog).
// Secrets are read from the config or the password file and never logged
// or put in an error. Every function is safe for concurrent use; a Logger
// is too.
package cluster
