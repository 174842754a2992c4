package shape

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// naiveFind is what the redactor's filter must find, by brute force: every
// occurrence of every form at every offset, and the letter-spaced secrets
// with any separator. spaced also holds the letter-spaced occurrences whose
// separator is a byte of the secret, which the filter may miss (it looks
// for runs where separators and characters differ).
func naiveFind(r *Redactor, s string) (must, may []span) {
	for _, sec := range r.short {
		for i := 0; i+len(sec) <= len(s); i++ {
			if s[i:i+len(sec)] == sec {
				must = append(must, span{i, i + len(sec)})
			}
		}
	}
	for _, g := range r.groups {
		for pi := range g.pats {
			p := &g.pats[pi]
			for i := 0; i+len(p.text) <= len(s); i++ {
				if p.at(s, i) {
					must = append(must, p.occurrence(s, i))
				}
			}
		}
		for _, sec := range g.spaced {
			for i := 0; i+2*len(sec)-1 <= len(s); i++ {
				sep, ok := s[min(i+1, len(s)-1)], true
				for k := range len(sec) {
					ok = ok && s[i+2*k] == sec[k] && (k == len(sec)-1 || s[i+2*k+1] == sep)
				}
				switch {
				case !ok:
				case strings.IndexByte(sec, sep) < 0:
					must = append(must, span{i, i + 2*len(sec) - 1})
				default:
					may = append(may, span{i, i + 2*len(sec) - 1})
				}
			}
		}
	}
	return must, may
}

func spanSet(spans []span) []span {
	out := slices.Clone(spans)
	slices.SortFunc(out, func(a, b span) int { return a.start - b.start + (a.end-b.end)*(1<<40) })
	return slices.Compact(out)
}

// FuzzFilterFindsWhatBruteForceFinds: the sampled filter finds every
// occurrence brute force finds, and nothing else. The fuzzer plants forms
// of the secrets (picked by index) between texts of its own.
func FuzzFilterFindsWhatBruteForceFinds(f *testing.F) {
	f.Add("Bearer SENTINELSECRET", "short", "echo ", " and ", "!", uint16(3), uint16(0), uint8(0))
	f.Add(`k/ey+<&>"\é=`, "12345678", "", "x", "", uint16(9), uint16(17), uint8(1))
	f.Add("aaaaaaaaaa", "abababab", "aaaa", "bab", "a", uint16(1), uint16(2), uint8(2))
	f.Add("s3cr3t-value", "other-secret-value", "s 3 c r 3 t - v a l u e", "", "x", uint16(30), uint16(5), uint8(3))
	f.Fuzz(func(t *testing.T, a, b, before, middle, after string, i, j uint16, mode uint8) {
		r := NewRedactor([]string{a, b})
		var pats []pattern
		for _, g := range r.groups {
			pats = append(pats, g.pats...)
		}
		plant := func(k uint16) string {
			if len(pats) == 0 {
				return ""
			}
			p := pats[int(k)%len(pats)]
			if mode&1 == 1 && p.hex {
				return strings.ToUpper(p.text) // the digits in upper case (and the rest, which may then not match)
			}
			return p.text
		}
		s := before + plant(i) + middle + plant(j) + after
		if mode&2 == 2 && len(a) > 0 {
			s += " " + strings.Join(strings.Split(a, ""), middle[:min(1, len(middle))]+"") + " "
		}
		must, may := naiveFind(r, s)
		got := spanSet(r.findText(s))
		allowed := spanSet(append(slices.Clone(must), may...))
		for _, m := range spanSet(must) {
			if !slices.Contains(got, m) {
				t.Fatalf("missed %q at %v in %q (secrets %q, %q; step %v)", s[m.start:m.end], m, s, a, b, steps(r))
			}
		}
		for _, g := range got {
			if !slices.Contains(allowed, g) {
				t.Fatalf("found %q at %v, which is no occurrence, in %q (secrets %q, %q)", s[g.start:g.end], g, s, a, b)
			}
		}
	})
}

func steps(r *Redactor) string {
	var out []string
	for _, g := range r.groups {
		out = append(out, fmt.Sprint(g.step))
	}
	return strings.Join(out, ",")
}
