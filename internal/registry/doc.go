// Package registry is the service's Confluent Schema Registry client: it
// fetches the schemas that records in the wire format name (with their
// references) into a record.Schemas, retrying with backoff while the
// registry cannot be reached, and registers the schema of Avro results. It
// counts every request in aggregator_schema_registry_requests_total{result}
// and reports whether the registry is out of reach (Down), for /readyz. A
// Client is safe for concurrent use.
package registry
