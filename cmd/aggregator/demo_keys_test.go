//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package main

import (
	"os"
	"os/signal"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// TestWatchCtrlC: on a terminal, watchCtrlC turns the interrupt character
// off (and line editing and echo), sends this process SIGINT when Ctrl-C
// is typed, and gives the terminal its settings back when stopped. Not
// parallel: the SIGINT would stop a demo another test runs meanwhile.
func TestWatchCtrlC(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open a pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	before, err := unix.IoctlGetTermios(int(tty.Fd()), ioctlReadTermios)
	if err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)

	stop := watchCtrlC(tty)
	during, err := unix.IoctlGetTermios(int(tty.Fd()), ioctlReadTermios)
	if err != nil {
		t.Fatal(err)
	}
	if during.Cc[unix.VINTR] != vdisable || during.Lflag&(unix.ICANON|unix.ECHO) != 0 || during.Lflag&unix.ISIG == 0 {
		t.Errorf("while watched: VINTR %#x, lflag %#x; want VINTR off, no ICANON or ECHO, ISIG kept (Ctrl-Z, Ctrl-\\)", during.Cc[unix.VINTR], during.Lflag)
	}
	if _, err := ptmx.Write([]byte{'x', ctrlC}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sigs:
	case <-time.After(10 * time.Second):
		t.Fatal("no SIGINT 10s after Ctrl-C was typed")
	}
	stop()
	after, err := unix.IoctlGetTermios(int(tty.Fd()), ioctlReadTermios)
	if err != nil {
		t.Fatal(err)
	}
	if *after != *before {
		t.Errorf("after stop: termios %+v, want it as before %+v", *after, *before)
	}
}
