package jsonscan

import (
	"fmt"
	"sync"
	"testing"
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
				if _, err := dec.ReadToken(); err != nil {
					t.Error(err)
				}
				if _, err := dec.ReadToken(); err != nil {
					t.Error(err)
				}
				v, err := dec.ReadToken()
				if err != nil || v.String() != want {
					t.Errorf("read %q (%v), want %q", v.String(), err, want)
				}
				release()
			}
		})
	}
	wg.Wait()
	dec, release := Decoder(nil)
	defer release()
	if _, err := dec.ReadToken(); err == nil {
		t.Fatal("a decoder of no data read a token")
	}
}
