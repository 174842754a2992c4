// Package shape turns what a tool returned into what the LLM sees: the dry-run
// text (pipeline step 10), the reducer registry and the built-in reducers
// (step 12), secret redaction (step 13), the budget trim (step 14) and the
// untrusted wrapper with chat-template token stripping (step 15).
//
// Everything here is pure: no I/O, no logging, no goroutines. Lengths are
// counted in Unicode code points; a byte that is not valid UTF-8 counts as one
// code point, as in [utf8.RuneCountInString].
package shape
