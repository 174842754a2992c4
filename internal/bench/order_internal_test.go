package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRepeatsAlternateTheOrder(t *testing.T) {
	scenarios := []Scenario{{Name: "raw-echo/saturate"}, {Name: "capstan-echo/saturate"}}
	names := func(r int) []string {
		var out []string
		for _, s := range runOrder(scenarios, r) {
			out = append(out, s.Name)
		}
		return out
	}
	assert.Equal(t, []string{"raw-echo/saturate", "capstan-echo/saturate"}, names(0))
	assert.Equal(t, []string{"capstan-echo/saturate", "raw-echo/saturate"}, names(1))
	assert.Equal(t, names(0), names(2))
	assert.Equal(t, "raw-echo/saturate", scenarios[0].Name, "the list itself is left as it was")
}
