package embedded

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/nats-io/nkeys"
)

// credsHeader is the first line of an embedded server's credentials file.
// nkeys.ParseDecoratedNKey (behind nats.NkeyOptionFromSeed and the nats
// CLI's --nkey) skips it and takes the seed line that follows.
const credsHeader = "# NKey user seed of Capstan's embedded NATS server, generated at its start. Keep it secret. Use: nats --nkey <this file>\n"

// newUser returns a new NKey user key pair.
func newUser() (nkeys.KeyPair, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("generate credentials: %w", err)
	}
	return kp, nil
}

// readUser reads the NKey user of an existing credentials file written by
// writeCreds.
func readUser(path string) (nkeys.KeyPair, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	defer wipe(data)
	kp, err := nkeys.ParseDecoratedUserNKey(data)
	if err != nil {
		return nil, fmt.Errorf("credentials file %s holds no NKey user seed", path)
	}
	return kp, nil
}

// checkDataDir refuses a data dir that is a symbolic link or not a directory:
// the credentials file must land where the operator (and the personalities'
// file floor) expects it.
func checkDataDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("data dir %s is a symbolic link; refusing to write credentials through it (give the link's target instead)", dir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("data dir %s is not a directory", dir)
	}
	return nil
}

// writeCreds writes kp's seed to path with mode 0600: into a temporary file
// of the same directory, created 0600, then renamed over path, so that the
// file never exists with a wider mode and a reader never sees half of it.
func writeCreds(path string, kp nkeys.KeyPair) (err error) {
	seed, err := kp.Seed() // kp's own buffer: wiped by kp.Wipe, not here
	if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+bus.CredsFileName+".*")
	if err != nil {
		return fmt.Errorf("write credentials: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	// CreateTemp makes the file 0600; say so explicitly so that a change of
	// that default could never widen it.
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("write credentials: make %s 0600: %w", tmp, err)
	}
	content := make([]byte, 0, len(credsHeader)+len(seed)+1)
	content = append(append(append(content, credsHeader...), seed...), '\n')
	defer wipe(content)
	if _, err := f.Write(content); err != nil {
		return fmt.Errorf("write credentials %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write credentials %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write credentials %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write credentials: %w", err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("write credentials: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		return fmt.Errorf("write credentials: %s has mode %s after writing, want a regular file with 0600", path, fi.Mode())
	}
	return nil
}

// wipe overwrites b so that a secret does not linger in memory.
func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}
