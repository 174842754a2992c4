package process

import "io"

// capture keeps the first max bytes of a stream and discards the rest, so
// the child never blocks on a full pipe.
type capture struct {
	max       int
	buf       []byte
	truncated bool
}

// drain reads r until EOF or an error (such as r being closed).
func (c *capture) drain(r io.Reader) {
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		c.write(chunk[:n])
		if err != nil {
			return
		}
	}
}

func (c *capture) write(p []byte) {
	if room := c.max - len(c.buf); len(p) > room {
		p = p[:max(room, 0)]
		c.truncated = true
	}
	c.buf = append(c.buf, p...)
}

// bytes returns the captured stream, ending with TruncatedMarker when it
// was cut.
func (c *capture) bytes() []byte {
	if c.truncated {
		return append(c.buf, TruncatedMarker...)
	}
	return c.buf
}
