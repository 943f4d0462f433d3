// Package view reads bytes as a string without copying them.
package view

import "unsafe"

// String returns b as a string that shares b's memory: no copy, no
// allocation. b must not change while the string is in use, and the
// string must not be kept past that (a map key, a stored field): copy it
// (strings.Clone) to keep it.
func String(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
