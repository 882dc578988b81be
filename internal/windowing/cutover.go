package windowing

// CutoverStart returns the cut-over time of a generation of spec's windows
// asked to take over at t (docs/changing-config.md#where-t-falls): the first start of one of its
// windows at or after t for time windows (tumbling, sliding: the slide's
// grid, calendar), so that every record at or after it has a window of
// the generation to go to, and t itself for sessions, count and global
// windows, which have no grid.
func (s Spec) CutoverStart(t int64) int64 {
	var w Window
	step := int64(0)
	switch s.Kind {
	case KindTumbling:
		w, step = Tumbling{Size: s.Size, Offset: s.Offset}.Assign(t), s.Size
	case KindSliding:
		w, step = Sliding{Size: s.Size, Slide: s.Slide, Offset: s.Offset}.Last(t), s.Slide
	case KindCalendar:
		c := Calendar{Unit: s.Calendar, Loc: s.Zone}
		w = c.Assign(t)
		step = w.End - w.Start
	default:
		return t
	}
	if w.Start == t {
		return t
	}
	return addSat(w.Start, step)
}
