package main

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"
	"github.com/prometheus/client_golang/prometheus"

	demopkg "aggregator/internal/demo"
	"aggregator/internal/metrics"
)

// ansiRE matches the control sequences the view writes: cursor home,
// clear to the end of the line and clear to the end of the screen.
var ansiRE = regexp.MustCompile(`\x1b\[[0-9;]*[HKJ]`)

// TestDemoViewInATerminal draws the demo's view on a pseudo-terminal of
// 80×24 and of 160×45, as the demo does on a real one (size read from the
// terminal, ANSI redraw), and checks what the terminal receives: no line
// wider than the terminal, a frame that leaves the cursor's line free (so
// nothing scrolls away), and the title, the broker address and the window
// settings on screen; every session key's row at 160×45.
func TestDemoViewInATerminal(t *testing.T) {
	for _, size := range []pty.Winsize{{Cols: 80, Rows: 24}, {Cols: 160, Rows: 45}} {
		t.Run(fmt.Sprintf("%dx%d", size.Cols, size.Rows), func(t *testing.T) {
			frame := drawOnPty(t, size, 1)
			lines := strings.Split(strings.TrimSuffix(frame, "\n"), "\n")
			if len(lines) > int(size.Rows)-1 {
				t.Errorf("frame of %d lines on %d rows:\n%s", len(lines), size.Rows, frame)
			}
			for _, l := range lines {
				if w := utf8.RuneCountInString(l); w > int(size.Cols) {
					t.Errorf("line of %d columns on %d: %q", w, size.Cols, l)
				}
			}
			for _, want := range []string{"aggregator demo", "Kafka: in-process kfake at 127.0.0.1:9", "metrics: http://localhost:9090/metrics",
				"tumbling 5s windows", "max_out_of_orderness 1s", "allowed_lateness 2s", "sid_7 "} {
				if !strings.Contains(frame, want) {
					t.Errorf("frame lacks %q:\n%s", want, frame)
				}
			}
			if size.Cols == 160 && !strings.Contains(frame, "p99_duration") {
				t.Errorf("160 columns hide the p99_duration column:\n%s", frame)
			}
		})
	}
}

// TestDemoInstancesInATerminal: with --instances 3 the frame still fits
// 80×24, and shows the partitions each instance holds and the check.
func TestDemoInstancesInATerminal(t *testing.T) {
	size := pty.Winsize{Cols: 80, Rows: 24}
	frame := drawOnPty(t, size, 3)
	lines := strings.Split(strings.TrimSuffix(frame, "\n"), "\n")
	if len(lines) > int(size.Rows)-1 {
		t.Errorf("frame of %d lines on %d rows:\n%s", len(lines), size.Rows, frame)
	}
	for _, l := range lines {
		if w := utf8.RuneCountInString(l); w > int(size.Cols) {
			t.Errorf("line of %d columns on %d: %q", w, size.Cols, l)
		}
	}
	for _, want := range []string{"3 instances · #1: partitions 0, 2 · #2: partition 1 · #3: no partition",
		"results equal a replay of the input: yes (8 windows compared, 0 open)", "sid_7 "} {
		if !strings.Contains(frame, want) {
			t.Errorf("frame lacks %q:\n%s", want, frame)
		}
	}
}

// drawOnPty draws one frame of the view, with eight keys' results, on a
// pseudo-terminal of the given size and returns the text it shows. With
// several instances, their metrics say which partitions each holds, and
// the check has compared each key's window.
func drawOnPty(t *testing.T, size pty.Winsize, instances int) string {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open a pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(tty, &size); err != nil {
		t.Fatal(err)
	}
	read := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(ptmx) // ends with EIO once tty is closed
		read <- b
	}()

	cfg, err := demoConfig(demoFlags{window: "tumbling", partitions: 3, listen: ":9090"}, []string{"127.0.0.1:9"}, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	board := demopkg.NewBoard(cfg.Sink.ResultsTopic, cfg.Sink.LateTopic, cfg.Sink.DeadLetterTopic)
	check := demopkg.NewCheck(cfg.Window.AllowedLateness.Milliseconds(), int(cfg.Sink.Partitions))
	for i := range 8 {
		key := fmt.Sprintf(`{"key":{"sid":"sid_%d"},"window_start":1922350200000,"window_end":1922350205000}`, i)
		value := fmt.Sprintf(`{"key":{"sid":"sid_%d"},"window_start":1922350200000,"window_end":1922350205000,"count":12,`+
			`"aggregates":{"calls":12,"total_duration":3456,"avg_duration":288.1234,"p99_duration":597},"firing":"late","revision":1,"watermark":1922350207000}`, i)
		if err := board.Observe(cfg.Sink.ResultsTopic, []byte(value)); err != nil {
			t.Fatal(err)
		}
		for _, side := range []demopkg.Side{demopkg.Service, demopkg.Reference} {
			if err := check.Observe(side, []byte(key), []byte(value)); err != nil {
				t.Fatal(err)
			}
		}
	}
	reg := newRegistry()
	if instances > 1 {
		held := [][]string{{"0", "2"}, {"1"}}
		for i := range instances {
			m := metrics.New(prometheus.WrapRegistererWith(prometheus.Labels{demopkg.InstanceLabel: strconv.Itoa(i + 1)}, reg))
			for j := 0; i < len(held) && j < len(held[i]); j++ {
				m.PartitionWatermark.WithLabelValues(demoInputTopic, held[i][j]).Set(1922350204)
			}
		}
	}
	source := &demopkg.Source{Gen: demopkg.NewGenerator(demopkg.GeneratorConfig{Keys: 8}, time.Time{})}
	v := newView(tty, demoFlags{keys: 8, rate: 50}, "in-process kfake at 127.0.0.1:9", "http://localhost:9090/metrics", cfg, source, board, reg)
	v.check = check
	v.draw(false)
	tty.Close()
	out := <-read
	// The terminal turns each \n into \r\n; the frame starts at the cursor's home.
	out = bytes.ReplaceAll(out, []byte("\r\n"), []byte("\n"))
	frames := strings.Split(string(out), "\x1b[H")
	return ansiRE.ReplaceAllString(frames[len(frames)-1], "")
}
