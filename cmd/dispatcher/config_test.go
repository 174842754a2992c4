package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func getenvFrom(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoadConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(getenvFrom(nil))
	require.NoError(t, err)
	require.Equal(t, Config{
		DataDir:            ".capstan",
		Prefix:             "capstan",
		DefaultPersonality: "default",
		Concurrency:        64,
		CallTimeout:        60 * time.Second,
		ShutdownGrace:      30 * time.Second,
		MaxDeliver:         5,
		StreamReplicas:     1,
		Tools:              nil,
	}, cfg)
}

func TestLoadConfigReadsEveryVariable(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(getenvFrom(map[string]string{
		"CAPSTAN_NATS_URL":            "nats://a:4222,nats://b:4222",
		"CAPSTAN_NATS_CREDS":          "/creds",
		"CAPSTAN_DATA_DIR":            "/data",
		"CAPSTAN_SUBJECT_PREFIX":      "acme",
		"CAPSTAN_DEFAULT_PERSONALITY": "coder",
		"CAPSTAN_CONCURRENCY":         "8",
		"CAPSTAN_CALL_TIMEOUT":        "1m30s",
		"CAPSTAN_SHUTDOWN_GRACE":      "0s",
		"CAPSTAN_MAX_DELIVER":         "3",
		"CAPSTAN_PERSONALITIES_DIR":   "/p",
		"CAPSTAN_MCP_SERVERS_DIR":     "/m",
		"CAPSTAN_TOOLS":               "echo, read_file",
		"CAPSTAN_LOG_LEVEL":           "DEBUG",
		"CAPSTAN_LOG_FORMAT":          "json",
		"CAPSTAN_STREAM_REPLICAS":     "3",
	}))
	require.NoError(t, err)
	require.Equal(t, Config{
		NATSURL: "nats://a:4222,nats://b:4222", NATSCreds: "/creds", DataDir: "/data", Prefix: "acme",
		DefaultPersonality: "coder", Concurrency: 8, CallTimeout: 90 * time.Second, ShutdownGrace: 0,
		MaxDeliver: 3, PersonalitiesDir: "/p", MCPServersDir: "/m", Tools: []string{"echo", "read_file"}, LogLevel: "DEBUG", LogFormat: "json",
		StreamReplicas: 3,
	}, cfg)
}

func TestLoadConfigErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"concurrency not an integer", map[string]string{"CAPSTAN_CONCURRENCY": "abc"}, `CAPSTAN_CONCURRENCY: "abc" is not an integer`},
		{"concurrency zero", map[string]string{"CAPSTAN_CONCURRENCY": "0"}, `CAPSTAN_CONCURRENCY: must be at least 1, got 0`},
		{"max deliver negative", map[string]string{"CAPSTAN_MAX_DELIVER": "-1"}, `CAPSTAN_MAX_DELIVER: must be at least 1, got -1`},
		{"max deliver float", map[string]string{"CAPSTAN_MAX_DELIVER": "2.5"}, `CAPSTAN_MAX_DELIVER: "2.5" is not an integer`},
		{"call timeout without unit", map[string]string{"CAPSTAN_CALL_TIMEOUT": "30"}, `CAPSTAN_CALL_TIMEOUT: "30" is not a duration (use Go format, e.g. 30s or 1m30s)`},
		{"call timeout zero", map[string]string{"CAPSTAN_CALL_TIMEOUT": "0s"}, `CAPSTAN_CALL_TIMEOUT: must be positive, got 0s`},
		{"grace negative", map[string]string{"CAPSTAN_SHUTDOWN_GRACE": "-1s"}, `CAPSTAN_SHUTDOWN_GRACE: must not be negative, got -1s`},
		{"prefix with a dot", map[string]string{"CAPSTAN_SUBJECT_PREFIX": "a.b"}, `CAPSTAN_SUBJECT_PREFIX: "a.b" must match ^[A-Za-z0-9_-]{1,128}$`},
		{"inbox prefix with a dot", map[string]string{"CAPSTAN_NATS_INBOX_PREFIX": "_INBOX.x"}, `CAPSTAN_NATS_INBOX_PREFIX: "_INBOX.x" must match ^[A-Za-z0-9_-]{1,128}$`},
		{"personality with a space", map[string]string{"CAPSTAN_DEFAULT_PERSONALITY": "a b"}, `CAPSTAN_DEFAULT_PERSONALITY: "a b" must match`},
		{"tools with an empty name", map[string]string{"CAPSTAN_TOOLS": "echo,,x"}, `CAPSTAN_TOOLS: tool name "" must match`},
		{"log level", map[string]string{"CAPSTAN_LOG_LEVEL": "loud"}, `CAPSTAN_LOG_LEVEL: "loud" must be debug, info, warn or error`},
		{"log format", map[string]string{"CAPSTAN_LOG_FORMAT": "xml"}, `CAPSTAN_LOG_FORMAT: "xml" must be text or json`},
		{"replicas", map[string]string{"CAPSTAN_STREAM_REPLICAS": "9"}, `CAPSTAN_STREAM_REPLICAS: must be 1 to 5, got 9`},
		{"two problems in one message", map[string]string{"CAPSTAN_CONCURRENCY": "x", "CAPSTAN_MAX_DELIVER": "y"},
			`CAPSTAN_CONCURRENCY: "x" is not an integer; CAPSTAN_MAX_DELIVER: "y" is not an integer`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := loadConfig(getenvFrom(tc.env))
			require.Error(t, err)
			require.Contains(t, err.Error(), "invalid configuration: "+tc.want)
			require.NotContains(t, err.Error(), "\n")
		})
	}
}

func TestInvalidConfigurationStopsWithExit2(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runT(t, map[string]string{"CAPSTAN_CONCURRENCY": "abc"}, "", "tools")
	require.Equal(t, exitUsage, code)
	require.Empty(t, stdout)
	require.Equal(t, "capstan: invalid configuration: CAPSTAN_CONCURRENCY: \"abc\" is not an integer\n", stderr)
}
