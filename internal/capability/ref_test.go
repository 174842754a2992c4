package capability

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/tool"
)

func TestRefMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, pattern, ref string
		want               bool
	}{
		{name: "exact", pattern: "providers/github/token", ref: "providers/github/token", want: true},
		{name: "exact other", pattern: "providers/github/token", ref: "providers/github/key"},
		{name: "prefix one more segment", pattern: "providers/github/*", ref: "providers/github/token", want: true},
		{name: "prefix two more segments", pattern: "providers/*", ref: "providers/github/token", want: true},
		{name: "prefix never itself", pattern: "providers/github/*", ref: "providers/github"},
		{name: "prefix never sibling", pattern: "providers/github/*", ref: "providers/githubx/token"},
		{name: "prefix never parent", pattern: "providers/github/*", ref: "providers/token"},
		{name: "star any", pattern: "*", ref: "a/b/c", want: true},
		{name: "star single segment", pattern: "*", ref: "a", want: true},
		{name: "dot-dot refused under star", pattern: "*", ref: "a/../b"},
		{name: "dot-dot refused under prefix", pattern: "http/*", ref: "http/../vault/root"},
		{name: "dot refused", pattern: "*", ref: "a/./b"},
		{name: "empty segment refused", pattern: "*", ref: "a//b"},
		{name: "leading slash refused", pattern: "*", ref: "/a"},
		{name: "trailing slash refused", pattern: "a/*", ref: "a/b/"},
		{name: "empty ref refused", pattern: "*", ref: ""},
		{name: "star in ref refused", pattern: "a/*", ref: "a/*"},
		{name: "malformed pattern", pattern: "a/*/b", ref: "a/x/b"},
		{name: "malformed prefix pattern", pattern: "../*", ref: "../x"},
		{name: "bare slash star", pattern: "/*", ref: "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, RefMatch(tt.pattern, tt.ref))
		})
	}
}

func TestValidateRefPattern(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"*", "a", "a/b", "a/*", "providers/github/*"} {
		require.NoError(t, ValidateRefPattern(ok), ok)
	}
	for _, bad := range []string{"", "/*", "a/*/b", "a/", "a/../*", "**", "a/**"} {
		require.EqualError(t, ValidateRefPattern(bad),
			`invalid secret pattern "`+bad+`": want a ref like a/b, a prefix like a/* or *`)
	}
}

func TestRefGrantCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		grant *RefGrant
		ref   string
		ok    bool
	}{
		{name: "declared no ceiling", grant: &RefGrant{Declared: []string{"http/*"}}, ref: "http/github", ok: true},
		{name: "not declared", grant: &RefGrant{Declared: []string{"http/*"}}, ref: "vault/root"},
		{name: "declared and in ceiling", grant: &RefGrant{Declared: []string{"http/*"}, Ceiling: &Ceiling{Allow: []string{"http/github/*"}}}, ref: "http/github/token", ok: true},
		{name: "declared outside ceiling", grant: &RefGrant{Declared: []string{"http/*"}, Ceiling: &Ceiling{Allow: []string{"http/github/*"}}}, ref: "http/stripe/token"},
		{name: "empty ceiling allows nothing", grant: &RefGrant{Declared: []string{"*"}, Ceiling: &Ceiling{Allow: []string{}}}, ref: "a"},
		{name: "star ceiling", grant: &RefGrant{Declared: []string{"a"}, Ceiling: &Ceiling{Allow: []string{"*"}}}, ref: "a", ok: true},
		{name: "dot-dot under star", grant: &RefGrant{Declared: []string{"*"}}, ref: "a/../b"},
		{name: "nil grant", ref: "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.grant.Check(tt.ref)
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, "SECRET_NOT_DECLARED: requested secret is not permitted for this tool")
			require.ErrorIs(t, err, tool.ErrSecretNotDeclared)
		})
	}
}

func TestBinaryGrantCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		grant  *BinaryGrant
		binary string
		ok     bool
	}{
		{name: "bare name", grant: &BinaryGrant{Declared: []string{"git", "ls"}}, binary: "git", ok: true},
		{name: "bare name not listed", grant: &BinaryGrant{Declared: []string{"git"}}, binary: "rm"},
		{name: "path not matched by bare name", grant: &BinaryGrant{Declared: []string{"git"}}, binary: "/tmp/git"},
		{name: "relative path not matched by bare name", grant: &BinaryGrant{Declared: []string{"git"}}, binary: "./git"},
		{name: "path listed exactly", grant: &BinaryGrant{Declared: []string{"/opt/bin/tool"}}, binary: "/opt/bin/tool", ok: true},
		{name: "relative path listed exactly", grant: &BinaryGrant{Declared: []string{"./git"}}, binary: "./git", ok: true},
		{name: "path listed not bare", grant: &BinaryGrant{Declared: []string{"/usr/bin/git"}}, binary: "git"},
		{name: "star any", grant: &BinaryGrant{Declared: []string{"*"}}, binary: "anything", ok: true},
		{name: "star with ceiling", grant: &BinaryGrant{Declared: []string{"*"}, Ceiling: &Ceiling{Allow: []string{"git", "ls"}}}, binary: "ls", ok: true},
		{name: "star outside ceiling", grant: &BinaryGrant{Declared: []string{"*"}, Ceiling: &Ceiling{Allow: []string{"git", "ls"}}}, binary: "rm"},
		{name: "declared outside ceiling", grant: &BinaryGrant{Declared: []string{"bash"}, Ceiling: &Ceiling{Allow: []string{"git"}}}, binary: "bash"},
		{name: "empty ceiling", grant: &BinaryGrant{Declared: []string{"git"}, Ceiling: &Ceiling{Allow: []string{}}}, binary: "git"},
		{name: "empty binary", grant: &BinaryGrant{Declared: []string{"*"}}, binary: ""},
		{name: "nil grant", binary: "git"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.grant.Check(tt.binary)
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, "BINARY_NOT_ALLOWED: "+tt.binary+" is not in the declared allowedBinaries")
			require.ErrorIs(t, err, tool.ErrBinaryNotAllowed)
		})
	}
}
