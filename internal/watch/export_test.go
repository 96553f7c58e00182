package watch

import "time"

// EncodeForTest returns the cursor of position p for sc, as if read at at.
func EncodeForTest(sc Scope, p Position, at time.Time) string { return encode(sc, p, at) }

// DecodeForTest returns the position of a cursor of sc.
func (s *Service) DecodeForTest(sc Scope, token string) (Position, error) {
	p, _, err := s.decode(sc, token, time.Now())
	return p, err
}

// LoopState is the loop's read count and whether its buffer is stale.
func (s *Service) LoopState() (reads int, stale bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads, s.stale
}
