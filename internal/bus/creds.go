package bus

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// CredsFileName is the name of the credentials file an embedded server
// writes into its data dir.
const CredsFileName = "embedded.creds"

// EmbeddedCredsFile returns the path of the credentials file that an
// embedded server storing in dataDir writes: <dataDir>/embedded.creds.
func EmbeddedCredsFile(dataDir string) string { return filepath.Join(dataDir, CredsFileName) }

// credsOption returns the option that authenticates a connection with the
// file at path: a NATS credentials file (a user JWT and its seed, as nsc and
// NGS write them) or an NKey user seed file (as an embedded server writes
// it), told apart by content. Errors name the file, never its content.
func credsOption(path string) (nats.Option, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("credentials file %s: %w", path, err)
	}
	defer wipe(data)
	if bytes.Contains(data, []byte("BEGIN NATS USER JWT")) {
		return nats.UserCredentials(path), nil
	}
	if kp, err := nkeys.ParseDecoratedUserNKey(data); err == nil {
		kp.Wipe()
		opt, err := nats.NkeyOptionFromSeed(path)
		if err != nil {
			return nil, fmt.Errorf("credentials file %s: %w", path, err)
		}
		return opt, nil
	}
	return nil, fmt.Errorf("credentials file %s is neither a NATS credentials file (a user JWT and its NKey seed) nor an NKey user seed file (a line starting with SU, as in %s)", path, CredsFileName)
}

// wipe overwrites b so that a secret does not linger in memory.
func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}

// CredsSecrets returns the secret values of the credentials file at path,
// the kinds credsOption accepts, for a redactor: the user JWT and the NKey
// seed of a NATS credentials file, the seed of an NKey user seed file (as
// an embedded server writes it). Errors name the file, never its content.
func CredsSecrets(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("credentials file %s: %w", path, err)
	}
	defer wipe(data)
	var out []string
	if bytes.Contains(data, []byte("BEGIN NATS USER JWT")) {
		jwt, err := nkeys.ParseDecoratedJWT(data)
		if err != nil {
			return nil, fmt.Errorf("credentials file %s: unreadable user JWT", path)
		}
		out = append(out, jwt)
	}
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return nil, fmt.Errorf("credentials file %s: no NKey seed", path)
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("credentials file %s: no NKey seed", path)
	}
	return append(out, string(seed)), nil
}
