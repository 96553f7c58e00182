//go:build !linux

package main

import "os"

// fileIsTerminal: f is a character device other than the null device (the
// binary is built and run on Linux; this keeps other systems building).
func fileIsTerminal(f *os.File) bool {
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(st, null)
}
