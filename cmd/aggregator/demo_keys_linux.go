package main

import "golang.org/x/sys/unix"

// The terminal's settings, as golang.org/x/term reads them on Linux.
const (
	ioctlReadTermios  = unix.TCGETS
	ioctlWriteTermios = unix.TCSETS
	vdisable          = 0 // _POSIX_VDISABLE: a control character turned off
)
