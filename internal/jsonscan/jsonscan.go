// Package jsonscan lends the one-pass JSON decoders the call decoder and the
// schema step read arguments with (go-json-experiment's jsontext), reused
// across calls: a decoder is a few hundred bytes of state, allocated for
// every call otherwise.
package jsonscan

import (
	"bytes"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// tolerant are the decoders' options: what encoding/json accepts, it
// accepts (a later duplicate name, invalid UTF-8 replaced by U+FFFD).
var tolerant = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

type scanner struct {
	buf bytes.Buffer
	dec jsontext.Decoder
}

var pool = sync.Pool{New: func() any { return new(scanner) }}

// empty is what a returned decoder reads, so that it holds no reference to
// the data it last read.
var empty = new(bytes.Buffer)

// Decoder returns a decoder reading data in place (no copy), tolerant as
// encoding/json is, and the function that returns it to the pool. The
// decoder and the values it returned must not be used after release;
// slices of data stay valid.
func Decoder(data []byte) (dec *jsontext.Decoder, release func()) {
	s := pool.Get().(*scanner)
	s.buf = *bytes.NewBuffer(data)
	s.dec.Reset(&s.buf, tolerant...)
	return &s.dec, func() {
		s.dec.Reset(empty)
		s.buf = bytes.Buffer{}
		pool.Put(s)
	}
}
