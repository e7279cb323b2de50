package policy

// SetAtomic switches atomic imports off (false) or back on, so a test
// can show what the batch is for.
func (s *Store) SetAtomic(on bool) { s.atomic = on }
