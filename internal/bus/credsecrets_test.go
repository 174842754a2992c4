package bus_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/bus"
)

// TestCredsSecrets: the secret values of both kinds of credentials file,
// for the worker's redactor; errors never carry the content.
func TestCredsSecrets(t *testing.T) {
	t.Parallel()
	ukp, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err := ukp.Seed()
	require.NoError(t, err)
	akp, err := nkeys.CreateAccount()
	require.NoError(t, err)
	upub, err := ukp.PublicKey()
	require.NoError(t, err)
	ujwt, err := jwt.NewUserClaims(upub).Encode(akp)
	require.NoError(t, err)
	decorated, err := jwt.FormatUserConfig(ujwt, seed)
	require.NoError(t, err)
	dir := t.TempDir()
	write := func(name string, content []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, content, 0o600))
		return p
	}

	got, err := bus.CredsSecrets(write("user.creds", decorated))
	require.NoError(t, err)
	require.Equal(t, []string{ujwt, string(seed)}, got, "a NATS credentials file: the JWT and the seed")

	got, err = bus.CredsSecrets(write("embedded.creds", append([]byte("# NKey user seed\n"), append(seed, '\n')...)))
	require.NoError(t, err)
	require.Equal(t, []string{string(seed)}, got, "an NKey seed file: the seed")

	bad := write("bad.creds", []byte("not a credential: hunter2-hunter2"))
	_, err = bus.CredsSecrets(bad)
	require.EqualError(t, err, "credentials file "+bad+": no NKey seed")

	_, err = bus.CredsSecrets(filepath.Join(dir, "missing"))
	require.EqualError(t, err, "credentials file "+filepath.Join(dir, "missing")+": no such file or directory")
}
