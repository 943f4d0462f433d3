// Package testhelp holds what the tests of the library and of the test
// node share: test certificates (a self-signed one, or a CA with server
// and client certificates) and a headless Chromium run that dumps a page's
// DOM. It is for tests only.
package testhelp

// Tail returns the last n bytes of s, marked with "..." when cut: for
// long outputs in failure messages.
func Tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
