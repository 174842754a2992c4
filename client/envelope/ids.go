package envelope

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/protocol"
)

// Prefixes of mapped call ids (see CallID).
const (
	// EncodedPrefix starts a call_id that holds the provider's id in
	// base64url without padding.
	EncodedPrefix = "cx-"
	// HashedPrefix starts a call_id that holds the base64url SHA-256 of a
	// provider id too long to encode.
	HashedPrefix = "ch-"
)

// maxEncoded is the longest base64url text that fits a token after EncodedPrefix.
const maxEncoded = protocol.MaxTokenLen - len(EncodedPrefix)

// CallID returns the Capstan call_id of a provider's tool-call id:
//
//   - the id itself when it is a valid token (^[A-Za-z0-9_-]{1,128}$, as
//     OpenAI's "call_..." and Anthropic's "toolu_..." ids are) that does not
//     start with "cx-" or "ch-";
//   - otherwise "cx-" + base64url(id) (no padding) when that fits 128
//     characters (ids of up to 93 bytes);
//   - otherwise "ch-" + base64url(SHA-256(id)).
//
// The mapping is one-to-one (the hashed form up to SHA-256 collisions): the
// three forms cannot produce the same token from different ids. An empty id
// gets a new random id (client.NewID). ProviderID reverses the first two forms.
func CallID(providerID string) string {
	switch {
	case providerID == "":
		return client.NewID()
	case protocol.ValidToken(providerID) && !mapped(providerID):
		return providerID
	}
	enc := base64.RawURLEncoding.EncodeToString([]byte(providerID))
	if len(enc) <= maxEncoded {
		return EncodedPrefix + enc
	}
	sum := sha256.Sum256([]byte(providerID))
	return HashedPrefix + base64.RawURLEncoding.EncodeToString(sum[:])
}

// ProviderID returns the provider's id that CallID mapped to callID; ok is
// false for a hashed id (keep the ToolCall to answer it) and for a token
// that is not a mapped form of valid base64url.
func ProviderID(callID string) (id string, ok bool) {
	if enc, found := strings.CutPrefix(callID, EncodedPrefix); found {
		b, err := base64.RawURLEncoding.DecodeString(enc)
		if err != nil {
			return "", false
		}
		return string(b), true
	}
	if strings.HasPrefix(callID, HashedPrefix) {
		return "", false
	}
	return callID, protocol.ValidToken(callID)
}

func mapped(id string) bool {
	return strings.HasPrefix(id, EncodedPrefix) || strings.HasPrefix(id, HashedPrefix)
}
