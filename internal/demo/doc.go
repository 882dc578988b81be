// Package demo is the engine of `aggregator demo`: a synthetic stream of
// call records (Generator), the loops that produce it to Kafka and read
// the service's output topics back (Produce, Watch, Board), and the
// terminal view (Render, Summary). Generator and the view are
// deterministic: randomness comes from a seed and time from the caller.
// A Board is safe for concurrent use; a Generator is not.
package demo
