package bad_test

import (
	"net/http/httptest"
	"os"
	"testing"
)

// External tests are exempt too.
func TestExternal(t *testing.T) {
	_ = os.TempDir()
	_ = httptest.NewRecorder()
}
