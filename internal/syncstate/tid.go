package syncstate

import "time"

// tidAlphabet is base32-sortable: digit values follow byte order, so TIDs
// sort byte-wise in time order.
const tidAlphabet = "234567abcdefghijklmnopqrstuvwxyz"

// TIDLength is the length of a TID.
const TIDLength = 13

var tidValue = func() (v [256]int8) {
	for i := range v {
		v[i] = -1
	}
	for i := 0; i < len(tidAlphabet); i++ {
		v[tidAlphabet[i]] = int8(i)
	}
	return v
}()

// TIDTime reports whether s is a TID (atproto timestamp identifier: 13
// characters of base32-sortable, the first one of 234567abcdefghij) and
// returns its timestamp: the 64-bit value's bits above the 10-bit clock
// identifier, read as microseconds since the Unix epoch. The top bit, which
// TIDs keep at zero, is counted as part of the timestamp, so a malformed TID
// with it set reads as a date centuries ahead rather than slipping under a
// future check.
func TIDTime(s string) (time.Time, bool) {
	if len(s) != TIDLength {
		return time.Time{}, false
	}
	var v uint64
	for i := 0; i < TIDLength; i++ {
		d := tidValue[s[i]]
		if d < 0 || (i == 0 && d >= 16) {
			return time.Time{}, false
		}
		v = v<<5 | uint64(d)
	}
	return time.UnixMicro(int64(v >> 10)), true
}

// NewTID returns the TID of t with the given clock identifier (0-1023). It
// is what hosts generate; tests and benchmarks use it to build revs.
func NewTID(t time.Time, clockID uint16) string {
	v := uint64(t.UnixMicro())<<10 | uint64(clockID&0x3ff)
	var b [TIDLength]byte
	for i := TIDLength - 1; i >= 0; i-- {
		b[i] = tidAlphabet[v&31]
		v >>= 5
	}
	return string(b[:])
}
