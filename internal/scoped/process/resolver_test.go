package process_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/scoped/process"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "tool"), []byte("x"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "data"), []byte("x"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(bin, "dir"), 0o755))
	first := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(first, "tool"), []byte("x"), 0o755))
	tests := []struct {
		name    string
		path    []string
		binary  string
		want    string
		wantErr string
		wantIs  error
	}{
		{name: "found", path: []string{bin}, binary: "tool", want: filepath.Join(bin, "tool")},
		{name: "first entry wins", path: []string{first, bin}, binary: "tool", want: filepath.Join(first, "tool")},
		{name: "missing entry skipped", path: []string{"/capstan/no/such/dir", bin}, binary: "tool", want: filepath.Join(bin, "tool")},
		{name: "not executable", path: []string{bin}, binary: "data", wantIs: exec.ErrNotFound},
		{name: "directory", path: []string{bin}, binary: "dir", wantIs: exec.ErrNotFound},
		{name: "absent", path: []string{bin}, binary: "nope", wantIs: exec.ErrNotFound},
		{name: "path refused", path: []string{bin}, binary: "./tool", wantErr: `resolve binary "./tool": not a bare name`},
		{name: "dot-dot refused", path: []string{bin}, binary: "..", wantErr: `resolve binary "..": not a bare name`},
		{name: "empty refused", path: []string{bin}, binary: "", wantErr: `resolve binary "": not a bare name`},
		{name: "default trusted PATH", binary: "echo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := process.NewResolver(tt.path).Resolve(tt.binary)
			switch {
			case tt.wantErr != "":
				require.EqualError(t, err, tt.wantErr)
			case tt.wantIs != nil:
				require.ErrorIs(t, err, tt.wantIs)
			case tt.want == "":
				require.NoError(t, err)
				require.Contains(t, process.DefaultTrustedPATH, filepath.Dir(got))
			default:
				require.NoError(t, err)
				require.Equal(t, tt.want, got)
			}
		})
	}
}

// TestResolveOnce checks that answers, found or not, are cached.
func TestResolveOnce(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	tool := filepath.Join(bin, "tool")
	require.NoError(t, os.WriteFile(tool, []byte("x"), 0o755))
	r := process.NewResolver([]string{bin})

	got, err := r.Resolve("tool")
	require.NoError(t, err)
	require.Equal(t, tool, got)
	_, err = r.Resolve("late")
	require.ErrorIs(t, err, exec.ErrNotFound)

	require.NoError(t, os.Remove(tool))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "late"), []byte("x"), 0o755))
	got, err = r.Resolve("tool")
	require.NoError(t, err, "a found binary stays resolved")
	require.Equal(t, tool, got)
	_, err = r.Resolve("late")
	require.ErrorIs(t, err, exec.ErrNotFound, "a missing binary stays missing")
	require.Equal(t, []string{bin}, r.Path())
}

func TestNewResolverRelativeEntryPanics(t *testing.T) {
	t.Parallel()
	require.Panics(t, func() { process.NewResolver([]string{"/bin", "bin"}) })
	require.Equal(t, []string{"/bin"}, process.NewResolver([]string{"", "/bin/"}).Path())
}
