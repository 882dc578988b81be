package pipeline

import (
	"aggregator/internal/ready"
	"aggregator/internal/repartition"
)

// InputValue is the input value that decoding a record fetched from
// partition id may read with a registry format's schemas (the shell
// fetches the schema ids they name, record.WireSchemaID, before it
// decodes): the record's value, or, for a data record of a repartition
// partition without headers (formats 2 and 3), the input value it
// carries. Stage 2 decodes that value when the record's compact form is
// of another config (a rollout), when it has none (format 3: its values
// did not decode in stage 1), and under each generation of a partition
// whose generations are several; whichever instance ran stage 1, this
// instance may not have met its schema yet. A marker (no value) or a
// record that does not parse holds none: nil. InputValue may run
// concurrently with Decode.
func (c *Core) InputValue(id int32, value []byte, headers bool) []byte {
	if c.s1 == nil || id >= c.layout.first || headers {
		return value // an input record, or a repartition record of format 1 (its value is the input's) or a marker
	}
	var in ready.Input
	if _, _, err := repartition.ParseValue(value, id, 0, c.layout.topics, &in); err != nil {
		return nil
	}
	return in.Value
}
