package httpapi

import (
	"crypto/rand"
	"encoding/hex"
)

// newRequestID is 16 random bytes in hex (32 characters), in one
// allocation: the string (the bytes and their hex on the stack).
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	var h [32]byte
	hex.Encode(h[:], b[:])
	return string(h[:])
}
