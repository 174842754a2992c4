package jsonscan

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Decoders lent to many goroutines at once each read their own data, and a
// released decoder reads nothing of what it read before.
func TestDecodersAreNotShared(t *testing.T) {
	t.Parallel()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				want := fmt.Sprintf("g%d-%d", g, i)
				dec, release := Decoder([]byte(`{"k":"` + want + `","k":"` + want + `"}`))
				_, err := dec.ReadToken()
				assert.NoError(t, err)
				_, err = dec.ReadToken()
				assert.NoError(t, err)
				v, err := dec.ReadToken()
				assert.NoError(t, err)
				assert.Equal(t, want, v.String())
				release()
			}
		})
	}
	wg.Wait()
	dec, release := Decoder(nil)
	defer release()
	_, err := dec.ReadToken()
	require.Error(t, err, "a decoder of no data read a token")
}
