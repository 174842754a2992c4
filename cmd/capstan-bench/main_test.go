package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func noEnv(string) string { return "" }

func TestHelpAndBadArguments(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-h"}, noEnv, &out, &errb))
	require.Contains(t, errb.String(), "usage: capstan-bench")
	require.Contains(t, errb.String(), "-scenarios")
	for _, f := range []string{"-flood-backlog", "-flood-sleep-ms", "-weights-window", "-weights-windows", "-weights-sleep-ms", "-many-personalities", "-many-calls"} {
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
		{"bad flood backlog", []string{"-flood-backlog", "-5"}, "flood backlog must be 1 to 1000000, got -5"},
		{"bad weights window", []string{"-weights-window", "-1s"}, "weights window must be positive and weights windows at least 1, got -1s and 3"},
		{"too many personalities", []string{"-many-personalities", "10000"}, "many personalities must be 1 to 9999, got 10000"},
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
