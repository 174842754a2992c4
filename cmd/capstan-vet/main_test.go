package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runMainEnv makes the test binary act as capstan-vet, so the tests below
// can run the real command (flags, package loading, exit code) in a child
// process without building it separately.
const runMainEnv = "CAPSTAN_VET_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0) // main exits by itself; this is only a backstop
	}
	os.Exit(m.Run())
}

func TestCommand(t *testing.T) {
	t.Parallel()
	const offender = "package x\n\nimport \"os\"\n\nvar _ = os.Getpid\n"
	const clean = "package x\n\nimport \"strings\"\n\nvar _ = strings.ToUpper\n"

	tests := []struct {
		name     string
		files    map[string]string
		args     []string
		wantCode int
		wantOut  string
	}{
		{
			name:     "built-in tool importing os",
			files:    map[string]string{"internal/tools/x/x.go": offender},
			args:     []string{"./..."},
			wantCode: 3,
			wantOut:  "internal/tools/x/x.go:3:8: tool package example.com/m/internal/tools/x imports os: tools must use the scoped accessors in tool.Context (Fetch, FS, Secrets, Process, KV) instead",
		},
		{
			name:     "marked user package",
			files:    map[string]string{"agent/x/x.go": "//capstan:toolpackage\n\n" + offender},
			args:     []string{"./..."},
			wantCode: 3,
			wantOut:  "tool package example.com/m/agent/x imports os",
		},
		{
			name:     "toolpkgs flag",
			files:    map[string]string{"agent/x/x.go": offender},
			args:     []string{"-toolpkgs=example.com/m/agent", "./..."},
			wantCode: 3,
			wantOut:  "tool package example.com/m/agent/x imports os",
		},
		{
			name: "clean module",
			files: map[string]string{
				"internal/tools/x/x.go":      clean,
				"internal/tools/x/x_test.go": offender,
				"agent/x/x.go":               offender,
			},
			args:     []string{"./..."},
			wantCode: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := writeModule(t, tt.files)
			code, out := runVet(t, dir, tt.args...)
			if code != tt.wantCode {
				t.Fatalf("exit code = %d, want %d; output:\n%s", code, tt.wantCode, out)
			}
			if tt.wantOut != "" && !strings.Contains(out, tt.wantOut) {
				t.Fatalf("output does not contain %q:\n%s", tt.wantOut, out)
			}
			if tt.wantOut == "" && strings.Contains(out, "tool package") {
				t.Fatalf("unexpected finding:\n%s", out)
			}
		})
	}
}

// writeModule writes a module example.com/m with the given files (relative
// path to content) into a fresh temporary directory and returns it.
func writeModule(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module example.com/m\n\ngo 1.26\n"
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runVet runs capstan-vet (this test binary in main mode) in dir and returns
// its exit code and combined output.
func runVet(t *testing.T, dir string, args ...string) (int, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), exe, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err = cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &exitErr):
		return exitErr.ExitCode(), out.String()
	default:
		t.Fatalf("run capstan-vet: %v", err)
		return 0, ""
	}
}
