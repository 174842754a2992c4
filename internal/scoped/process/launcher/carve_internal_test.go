package launcher

import (
	"path/filepath"
	"testing"

	"github.com/capstanhq/capstan/internal/capability"
)

// FuzzCovers: the launcher's covers (which keeps the capability package
// out of launcher mode's start-up) matches capability.Covers on absolute,
// clean paths, the only ones a carver compares.
func FuzzCovers(f *testing.F) {
	for _, seed := range [][2]string{
		{"/", "/etc"}, {"/data", "/data2"}, {"/data", "/data/x"}, {"/data", "/data"}, {"/root/w", "/root"},
		{"/a/b", "/a/b/c/d"}, {"/a/b/", "/a/b/c"}, {"/tmp/x", "/tmp/x.y"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, prefix, p string) {
		if !filepath.IsAbs(prefix) || filepath.Clean(prefix) != prefix || !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return
		}
		if got, want := covers(prefix, p), capability.Covers(prefix, p); got != want {
			t.Fatalf("covers(%q, %q) = %v, capability.Covers says %v", prefix, p, got, want)
		}
	})
}
