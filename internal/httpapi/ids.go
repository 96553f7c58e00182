package httpapi

import (
	"crypto/rand"
	"encoding/hex"
)

func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
