package bench

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseServeCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, line string
		want       serveCommand
		err        string
	}{
		{"memory", "memory", serveCommand{name: CommandMemory}, ""},
		{"memory with spaces and CR", "  memory \r", serveCommand{name: CommandMemory}, ""},
		{"heap profile", "heapprofile /tmp/heap.out", serveCommand{name: CommandHeapProfile, path: "/tmp/heap.out"}, ""},
		{"heap profile path with spaces", "heapprofile /tmp/a b/heap.out", serveCommand{name: CommandHeapProfile, path: "/tmp/a b/heap.out"}, ""},
		{"heap profile without path", "heapprofile", serveCommand{}, "command heapprofile needs a file path"},
		{"heap profile blank path", "heapprofile   ", serveCommand{}, "command heapprofile needs a file path"},
		{"memory with argument", "memory now", serveCommand{}, `command memory takes no argument, got "now"`},
		{"empty", "", serveCommand{}, "empty command"},
		{"unknown", "stats", serveCommand{}, `unknown command "stats" (want memory or heapprofile <path>)`},
		{"case matters", "Memory", serveCommand{}, `unknown command "Memory"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseServeCommand(tc.line)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestParseServeReply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, line string
		heap       uint64
		err        string
	}{
		{"memory", `{"memory":{"heap_inuse_bytes":42,"rss_bytes":7}}`, 42, ""},
		{"profile written", `{}`, 0, ""},
		{"error", `{"error":"heap profile: open /nope/h: no such file or directory"}`, 0, "heap profile: open /nope/h"},
		{"not JSON", `nats://127.0.0.1:4222`, 0, `reply "nats://127.0.0.1:4222" is not JSON`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseServeReply(tc.line)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			if tc.heap != 0 {
				require.NotNil(t, got.Memory)
				require.Equal(t, tc.heap, got.Memory.HeapInuse)
			}
		})
	}
}

// FuzzParseServeCommand: any line parses or fails without panicking, and a
// parsed command written back as its line parses to itself.
func FuzzParseServeCommand(f *testing.F) {
	for _, s := range []string{"memory", "heapprofile /tmp/x", "heapprofile", " memory\t", "x y z", "heapprofile  a  b "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		cmd, err := parseServeCommand(line)
		if err != nil {
			return
		}
		again := cmd.name
		if cmd.path != "" {
			again += " " + cmd.path
		}
		back, err := parseServeCommand(again)
		require.NoError(t, err, "%q", again)
		require.Equal(t, cmd, back)
		require.Equal(t, strings.TrimSpace(cmd.path), cmd.path)
	})
}
