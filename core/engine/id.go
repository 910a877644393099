package engine

import (
	"crypto/rand"
	"encoding/hex"
)

// newID returns a random (version 4) UUID string for msg, execution and
// context ids. It is written here rather than taken from google/uuid because
// that package imports net (for node ids), and core must stay free of net.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
