package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// fileIsTerminal: f has terminal attributes (isatty).
func fileIsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
