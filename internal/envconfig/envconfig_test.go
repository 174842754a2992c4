package envconfig_test

import (
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/envconfig"
	"github.com/stretchr/testify/require"
)

type cfg struct {
	URL   string        `env:"X_URL" envDefault:"nats://x"`
	N     int           `env:"X_N" envDefault:"64"`
	D     time.Duration `env:"X_D" envDefault:"30s"`
	Tools []string      `env:"X_TOOLS" envSeparator:","`
}

func getenv(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParse(t *testing.T) {
	t.Parallel()
	var c cfg
	require.NoError(t, envconfig.Parse(&c, getenv(nil)))
	require.Equal(t, cfg{URL: "nats://x", N: 64, D: 30 * time.Second}, c)

	c = cfg{}
	require.NoError(t, envconfig.Parse(&c, getenv(map[string]string{"X_N": "3", "X_TOOLS": "echo,read_file", "X_D": "1m"})))
	require.Equal(t, 3, c.N)
	require.Equal(t, []string{"echo", "read_file"}, c.Tools)
	require.Equal(t, time.Minute, c.D)
}

func TestParseErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"int", map[string]string{"X_N": "abc"}, `X_N: "abc" is not an integer`},
		{"duration", map[string]string{"X_D": "soon"}, `X_D: "soon" is not a duration (use Go format, e.g. 30s or 1m30s)`},
		{"both", map[string]string{"X_N": "x", "X_D": "y"}, `X_N: "x" is not an integer; X_D: "y" is not a duration (use Go format, e.g. 30s or 1m30s)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var c cfg
			require.EqualError(t, envconfig.Parse(&c, getenv(tc.env)), tc.want)
		})
	}
}
