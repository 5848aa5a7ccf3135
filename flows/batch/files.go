package batch

// FilePositions returns, for one flow, how far each file was read by its
// committed loads: the position with the greatest RowGroup (the next row to
// read), Done when any load read the file to its end.
func (l *Ledger) FilePositions(flow string) map[string]Position {
	out := map[string]Position{}
	for _, ld := range l.Loads {
		if ld.Flow != flow {
			continue
		}
		for _, p := range ld.Positions {
			if p.File == "" {
				continue
			}
			cur, ok := out[p.File]
			if !ok || p.RowGroup > cur.RowGroup {
				cur.File, cur.RowGroup = p.File, p.RowGroup
			}
			cur.Done = cur.Done || p.Done
			out[p.File] = cur
		}
	}
	return out
}
