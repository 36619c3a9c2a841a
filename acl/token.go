package acl

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
)

// TokenPrefix starts every bearer token raftq draws, so a leaked one is
// easy to recognise (secret scanners, grep) and a typo'd one is told
// apart from another system's.
const TokenPrefix = "rqt_"

// NewToken draws a bearer token: 256 bits from crypto/rand, base64url,
// with TokenPrefix. Its SHA-256 is what the cluster stores. Here, not in
// a group's package, because the data group (before the handover) and the
// meta group (after it) both draw them.
func NewToken() (string, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("draw token: %w", err)
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:]), nil
}

// HashToken is the SHA-256 of a bearer token as the cluster stores it.
func HashToken(token string) [32]byte { return sha256.Sum256([]byte(token)) }

// CreatedToken is a new token, whose secret only this answer carries.
type CreatedToken struct {
	Name, Identity, Token string
	ExpiresUnixMs         int64 // 0 = never
}
