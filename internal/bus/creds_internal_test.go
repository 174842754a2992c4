package bus

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
)

// TestJWTCredentialsFileStillAuthenticates checks that a NATS credentials
// file (user JWT and seed, as nsc writes it) is recognised as such and
// authenticates against a server in operator mode, as Creds did before NKey
// seed files were accepted too. (The server runs without JetStream, which
// bus.Connect would need, so the option is used directly.)
func TestJWTCredentialsFileStillAuthenticates(t *testing.T) {
	t.Parallel()
	okp, err := nkeys.CreateOperator()
	require.NoError(t, err)
	opub, err := okp.PublicKey()
	require.NoError(t, err)
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "test"
	ojwt, err := oc.Encode(okp)
	require.NoError(t, err)
	oc, err = jwt.DecodeOperatorClaims(ojwt)
	require.NoError(t, err)

	akp, err := nkeys.CreateAccount()
	require.NoError(t, err)
	apub, err := akp.PublicKey()
	require.NoError(t, err)
	ajwt, err := jwt.NewAccountClaims(apub).Encode(okp)
	require.NoError(t, err)

	ukp, err := nkeys.CreateUser()
	require.NoError(t, err)
	upub, err := ukp.PublicKey()
	require.NoError(t, err)
	uc := jwt.NewUserClaims(upub)
	uc.IssuerAccount = apub
	ujwt, err := uc.Encode(akp)
	require.NoError(t, err)
	useed, err := ukp.Seed()
	require.NoError(t, err)
	content, err := jwt.FormatUserConfig(ujwt, useed)
	require.NoError(t, err)
	creds := filepath.Join(t.TempDir(), "user.creds")
	require.NoError(t, os.WriteFile(creds, content, 0o600))

	resolver := &server.MemAccResolver{}
	require.NoError(t, resolver.Store(apub, ajwt))
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		TrustedOperators: []*jwt.OperatorClaims{oc}, AccountResolver: resolver})
	require.NoError(t, err)
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	require.True(t, ns.ReadyForConnections(15*time.Second))

	opt, err := credsOption(creds)
	require.NoError(t, err)
	nc, err := nats.Connect(ns.ClientURL(), opt, nats.NoReconnect())
	require.NoError(t, err, "the JWT credentials file authenticates")
	nc.Close()

	_, err = nats.Connect(ns.ClientURL(), nats.NoReconnect())
	require.ErrorIs(t, err, nats.ErrAuthorization, "the server does require credentials")
}
