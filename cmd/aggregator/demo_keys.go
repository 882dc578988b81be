//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// ctrlC is the interrupt key, Ctrl-C.
const ctrlC = 0x03

// watchCtrlC makes Ctrl-C on the demo's terminal (in, its stdin) a key
// the demo reads instead of the SIGINT the terminal sends every process
// of its foreground group. `go run ./cmd/aggregator demo` is such a
// group: the go command and the demo it runs; a go command that receives
// SIGINT exits 1 whatever its program does (its idle build workers take
// the signal as an interrupted build), and so would end the demo's every
// run with "exit status 1". With the terminal's interrupt character
// disabled (and no line editing or echo, so that the key arrives at once
// and keys typed do not scroll the view), a Ctrl-C read sends SIGINT to
// this process alone: the demo stops as it does on SIGINT, and the go
// command sees it exit 0. A second Ctrl-C gives the terminal back its
// settings first, as the process may then die of it. Ctrl-Z and Ctrl-\
// work as before. stop gives the terminal its settings back; with a
// stdin that is not a terminal nothing changes.
func watchCtrlC(in io.Reader) (stop func()) {
	f, ok := in.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return func() {}
	}
	fd := int(f.Fd())
	saved, err := unix.IoctlGetTermios(fd, ioctlReadTermios)
	if err != nil {
		return func() {} // Ctrl-C stays SIGINT
	}
	t := *saved
	t.Lflag &^= unix.ICANON | unix.ECHO
	t.Cc[unix.VINTR] = vdisable
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if unix.IoctlSetTermios(fd, ioctlWriteTermios, &t) != nil {
		return func() {}
	}
	var restoreOnce sync.Once
	restore := func() { restoreOnce.Do(func() { _ = unix.IoctlSetTermios(fd, ioctlWriteTermios, saved) }) }
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { readCtrlC(fd, done, restore) })
	return func() {
		close(done)
		wg.Wait()
		restore()
	}
}

// readCtrlC reads the terminal fd until done is closed (it looks every
// pollInterval) or the terminal is gone, and sends this process SIGINT
// for each Ctrl-C, after the first with the terminal's settings given
// back (restore).
func readCtrlC(fd int, done <-chan struct{}, restore func()) {
	const pollInterval = 100 // ms
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	buf := make([]byte, 64)
	for n := 0; ; {
		select {
		case <-done:
			return
		default:
		}
		ready, err := unix.Poll(fds, pollInterval)
		if errors.Is(err, unix.EINTR) || err == nil && ready == 0 {
			continue
		}
		if err != nil || fds[0].Revents&unix.POLLIN == 0 {
			return // hung up
		}
		m, err := unix.Read(fd, buf)
		if err != nil || m == 0 {
			return
		}
		for range bytes.Count(buf[:m], []byte{ctrlC}) {
			if n++; n > 1 {
				restore()
			}
			_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
		}
	}
}
