package frontdoor

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
)

// heldState is what the request state of an input-required tools/call
// result carries (elicitation.go): the held call and whom it was given to.
type heldState struct {
	Personality string `json:"p"`
	Session     string `json:"s"`
	User        string `json:"u,omitempty"`
	CallID      string `json:"c"`
	ArgsSHA256  string `json:"h"`
	Tool        string `json:"t"`
}

// requestStates signs request states with a key of the process: a state
// is valid only for the front door that gave it, until it stops. The
// state is signed, not encrypted: it names a call id and a tool, which the
// client knows already.
type requestStates struct {
	key [32]byte
}

var errBadState = errors.New("not a request state of this MCP front door")

func newRequestStates() *requestStates {
	s := &requestStates{}
	_, _ = rand.Read(s.key[:]) // never fails (crypto/rand)
	return s
}

// seal returns the request state of h: base64url(JSON) "." base64url(HMAC).
func (s *requestStates) seal(h heldState) string {
	data, _ := json.Marshal(h) // strings only
	payload := base64.RawURLEncoding.EncodeToString(data)
	return payload + "." + base64.RawURLEncoding.EncodeToString(s.mac(payload))
}

// open verifies a request state given by seal and returns what it carries.
func (s *requestStates) open(state string) (heldState, error) {
	payload, sig, ok := strings.Cut(state, ".")
	if !ok {
		return heldState{}, errBadState
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac(payload)) {
		return heldState{}, errBadState
	}
	data, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return heldState{}, errBadState
	}
	var h heldState
	if err := json.Unmarshal(data, &h); err != nil || h.CallID == "" || h.ArgsSHA256 == "" {
		return heldState{}, errBadState
	}
	return h, nil
}

func (s *requestStates) mac(payload string) []byte {
	m := hmac.New(sha256.New, s.key[:])
	m.Write([]byte("capstan frontdoor request state\x00"))
	m.Write([]byte(payload))
	return m.Sum(nil)
}
