package explain

import (
	"fmt"
	"os"

	"github.com/capstanhq/capstan/internal/capability"
)

// Parse parses the stored document of personality id as a worker does,
// with this process's ${HOME}; a document whose id differs from its key
// is refused.
func Parse(doc []byte, id string) (*capability.Personality, error) {
	home, _ := os.UserHomeDir()
	p, err := capability.Parse(doc, capability.Env{Home: home})
	if err == nil && p.ID != id {
		err = fmt.Errorf("document id %q does not match its key %q", p.ID, id)
	}
	return p, err
}
