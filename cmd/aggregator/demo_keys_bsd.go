//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package main

import "golang.org/x/sys/unix"

// The terminal's settings, as golang.org/x/term reads them on the BSDs
// and macOS.
const (
	ioctlReadTermios  = unix.TIOCGETA
	ioctlWriteTermios = unix.TIOCSETA
	vdisable          = 0xff // _POSIX_VDISABLE: a control character turned off
)
