package pipeline

// WithOneList gives p, just made, one operator list for every partition
// following the merged watermark: the shape of by_key with
// watermark.scope global before each partition had its own list, which
// the tests compare the lists per partition with.
func WithOneList(p *Processor) {
	ops, err := newOperators(p.spec, resultSink{p, p.cfg.State.ConfigVersion}, oneList, p.tracking)
	if err != nil {
		panic(err)
	}
	p.ops = ops
}
