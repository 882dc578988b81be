//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package main

import "io"

// watchCtrlC leaves Ctrl-C as the terminal sends it (SIGINT) where the
// demo does not read its terminal's keys.
func watchCtrlC(io.Reader) (stop func()) { return func() {} }
