package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func noEnv(string) string { return "" }

// TestMain lets this test binary stand in for capstan-bench as the child
// of -server-process, which runs its own executable with -serve <dir>.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-serve" {
		if err := run(context.Background(), os.Args[1:], noEnv, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "capstan-bench:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestHelpAndBadArguments(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-h"}, noEnv, &out, &errb))
	require.Contains(t, errb.String(), "usage: capstan-bench")
	require.Contains(t, errb.String(), "-scenarios")
	for _, f := range []string{"-flood-backlog", "-flood-sleep-ms", "-weights-window", "-weights-windows", "-weights-sleep-ms", "-many-personalities", "-many-calls", "-held-calls"} {
		require.Contains(t, errb.String(), f)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"positional", []string{"now"}, `unexpected argument "now"`},
		{"unknown flag", []string{"-fast"}, "flag provided but not defined: -fast"},
		{"bad duration", []string{"-duration", "-1s"}, "duration must be positive, got -1s"},
		{"no scenario", []string{"-scenarios", "nope"}, `no scenario matches ["nope"]`},
		{"server profile without soak", []string{"-server-memprofile", "h.out", "-server-process"}, "-server-memprofile needs -soak and -server-process"},
		{"server profile without server process", []string{"-server-memprofile", "h.out", "-soak", "10"}, "-server-memprofile needs -soak and -server-process"},
		{"negative soak", []string{"-soak", "-3"}, "-soak must be a positive number of calls, got -3"},
		{"negative soak chunk", []string{"-soak", "3", "-soak-chunk", "-1s"}, "-soak-chunk must be positive, got -1s"},
		{"negative soak settle", []string{"-soak", "3", "-soak-settle", "-1s"}, "-soak-settle must not be negative, got -1s"},
		{"bad flood backlog", []string{"-flood-backlog", "-5"}, "flood backlog must be 1 to 1000000, got -5"},
		{"bad weights window", []string{"-weights-window", "-1s"}, "weights window must be positive and weights windows at least 1, got -1s and 3"},
		{"too many personalities", []string{"-many-personalities", "10000"}, "many personalities must be 1 to 9999, got 10000"},
		{"bad held calls", []string{"-held-calls", "-2"}, "held calls must be 1 to 100000, got -2"},
		{"negative exectrace slow", []string{"-exectrace", "t.out", "-exectrace-slow", "-1ms"}, "-exectrace-slow must not be negative and -exectrace-max must be at least 1, got -1ms and 10"},
		{"no exectrace snapshot", []string{"-exectrace", "t.out", "-exectrace-max", "0"}, "-exectrace-slow must not be negative and -exectrace-max must be at least 1, got 5ms and 0"},
		{"exectrace of a soak", []string{"-exectrace", "t.out", "-soak", "10"}, "-exectrace traces the scenarios, not -soak"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			require.ErrorContains(t, run(context.Background(), tc.args, noEnv, &out, &errb), tc.want)
		})
	}
}

func TestRunWritesTableJSONAndProfile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jsonPath, prof := filepath.Join(dir, "bench.json"), filepath.Join(dir, "cpu.out")
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := run(ctx, []string{"-duration", "200ms", "-warmup", "50ms", "-repeats", "1", "-concurrency", "4", "-rate", "100",
		"-scenarios", "raw-echo/rate, capstan-echo/rate", "-dir", filepath.Join(dir, "store"), "-json", jsonPath, "-cpuprofile", prof}, noEnv, &out, &errb)
	require.NoError(t, err, errb.String())
	require.Contains(t, out.String(), "capstan-echo/rate / raw-echo/rate")
	require.Contains(t, errb.String(), "capstan-echo/rate", "progress lines")

	data, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var rep struct {
		Scenarios []struct {
			Name string `json:"name"`
		} `json:"scenarios"`
		Ratios []struct {
			Throughput float64 `json:"throughput"`
		} `json:"ratios"`
	}
	require.NoError(t, json.Unmarshal(data, &rep))
	require.Len(t, rep.Scenarios, 2)
	require.Len(t, rep.Ratios, 1)
	require.Positive(t, rep.Ratios[0].Throughput)
	st, err := os.Stat(prof)
	require.NoError(t, err)
	require.Positive(t, st.Size())
}

// TestSoakServerProcess runs a short soak with the server in a child
// process (this test binary, see TestMain) and checks that the report has
// the server process's memory per retained result and the audit stream's
// bytes per call, and that the child wrote its heap profile.
// TestExecTrace: -exectrace-slow 0 traces the whole run to the file; a
// threshold every call passes writes one snapshot per -exectrace-max, each
// an execution trace with the slow calls marked. Not parallel: one
// execution trace at a time per process.
func TestExecTrace(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, slow string
		files      []string
	}{
		{"whole run", "0", []string{"run.trace"}},
		{"snapshots", "1ns", []string{"run.trace.1", "run.trace.2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := filepath.Join(dir, tc.name)
			require.NoError(t, os.Mkdir(sub, 0o755))
			var out, errb bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := run(ctx, []string{"-duration", "500ms", "-warmup", "50ms", "-repeats", "1", "-concurrency", "4", "-rate", "100",
				"-scenarios", "capstan-echo/rate", "-dir", filepath.Join(sub, "store"), "-quiet",
				"-exectrace", filepath.Join(sub, "run.trace"), "-exectrace-slow", tc.slow, "-exectrace-max", "2"}, noEnv, &out, &errb)
			require.NoError(t, err, errb.String())
			entries, err := os.ReadDir(sub)
			require.NoError(t, err)
			var got []string
			for _, e := range entries {
				if e.Name() != "store" {
					got = append(got, e.Name())
				}
			}
			require.Equal(t, tc.files, got)
			for _, f := range got {
				b, err := os.ReadFile(filepath.Join(sub, f))
				require.NoError(t, err)
				require.True(t, bytes.HasPrefix(b, []byte("go 1.")), "%s is an execution trace", f)
				if tc.slow != "0" {
					require.Contains(t, string(b), "capstan-bench.slow-call", "the slow calls are marked")
					require.Contains(t, errb.String(), "exectrace: "+filepath.Join(sub, f)+": call ")
				}
			}
		})
	}
}

func TestSoakServerProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	prof := filepath.Join(dir, "server-heap.out")
	jsonPath := filepath.Join(dir, "soak.json")
	// The child's stderr is copied into errb from another goroutine.
	var out bytes.Buffer
	var errb lockedBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := run(ctx, []string{"-soak", "200", "-soak-chunk", "200ms", "-soak-settle", "100ms", "-concurrency", "4", "-arg-bytes", "256",
		"-server-process", "-server-memprofile", prof, "-json", jsonPath}, noEnv, &out, &errb)
	require.NoError(t, err, errb.String())
	require.Contains(t, out.String(), "in its own process")
	require.Contains(t, out.String(), "per retained result")
	require.Contains(t, errb.String(), "soak: ")

	data, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var rep struct {
		Calls           int      `json:"calls"`
		RetainedResults int64    `json:"retained_results"`
		ServerHeap      *float64 `json:"server_heap_bytes_per_retained_result"`
		ServerRSS       *float64 `json:"server_rss_bytes_per_retained_result"`
		SettledHeap     *float64 `json:"settled_server_heap_bytes_per_retained_result"`
		Audit           float64  `json:"audit_disk_bytes_per_call"`
		After           struct {
			Server *struct {
				HeapInuse uint64 `json:"heap_inuse_bytes"`
				RSS       uint64 `json:"rss_bytes"`
			} `json:"server"`
		} `json:"after"`
	}
	require.NoError(t, json.Unmarshal(data, &rep), string(data))
	require.GreaterOrEqual(t, rep.Calls, 200)
	require.GreaterOrEqual(t, rep.RetainedResults, int64(rep.Calls))
	require.NotNil(t, rep.ServerHeap)
	require.NotNil(t, rep.ServerRSS)
	require.NotNil(t, rep.SettledHeap)
	require.Positive(t, rep.Audit)
	require.NotNil(t, rep.After.Server)
	require.Positive(t, rep.After.Server.HeapInuse)
	require.Positive(t, rep.After.Server.RSS)
	for _, p := range []string{prof, prof + ".settled"} {
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.Positive(t, st.Size(), p)
	}
	require.Contains(t, out.String(), "settled (100ms later)")
}

// lockedBuffer is a bytes.Buffer that several goroutines may write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
